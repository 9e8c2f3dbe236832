"""A run's fleet folder: where env nodes and the spreader find each other, on storage every node shares.

    FOLDER/keys/       the run's CURVE key pairs (made once, owner-only): client.key (the spreader's),
                       node.key (every env node's gate); evaluation.secret, in every node's evaluation seeds
                       (air.env.seeds: the nodes of one run draw one group's dice alike)
    FOLDER/env.json    the env an env node serves: verifiers' ``[env]`` table (taskset id and arguments)
    FOLDER/nodes/      one record per live env node (NAME.json): its address, capacity, GPUs; written
                       once its env server answers, removed when it stops
    FOLDER/spread/     each spreader's figures per node (SOURCE.json), rewritten as they change
    FOLDER/logs/NAME/  each env node's logs

Nothing here is secret but ``keys/``: a record names an address, and only a peer holding the run's client
key gets past that address's handshake.
"""

from __future__ import annotations

import json
import os
import secrets
import stat
import tempfile
import time
from pathlib import Path

import zmq
from pydantic import BaseModel, Field, ValidationError

from air.fleet.errors import FleetError


class KeyPair(BaseModel):
    public: bytes
    secret: bytes


class NodeRecord(BaseModel):
    """What an env node says of itself once its env server answers."""

    name: str
    address: str  # tcp://host:port of its gate
    incarnation: str  # new at every start: a restarted node is a new connection, its old runs are gone
    host: str
    pid: int
    capacity: int = Field(ge=1)  # episodes it runs at once
    gpus: list[str] = []
    started: float = Field(default_factory=time.time)


class FleetFolder:
    def __init__(self, root: Path | str) -> None:
        self.root = Path(root).expanduser().resolve()

    keys = property(lambda self: self.root / "keys")
    evaluation_secret = property(lambda self: self.keys / "evaluation.secret")
    nodes = property(lambda self: self.root / "nodes")
    spread = property(lambda self: self.root / "spread")
    env_file = property(lambda self: self.root / "env.json")

    def figures_path(self, source: str) -> Path:
        return self.spread / f"{source}.json"

    def figures(self, source: str) -> dict:
        """A spreader's last figures ({} before it wrote any, or while a write is half done elsewhere)."""
        try:
            figures = json.loads(self.figures_path(source).read_text())
        except (OSError, ValueError):
            return {}
        return figures if isinstance(figures, dict) else {}

    def all_figures(self) -> list[dict]:
        """Every spreader's figures, by source name."""
        return [figures for path in sorted(self.spread.glob("*.json")) if (figures := self.figures(path.stem))]

    def logs(self, node: str) -> Path:
        return self.root / "logs" / node

    # -- set-up, once per run ------------------------------------------------------------------------------------

    def create(self, env: dict) -> None:
        """Make the folder, the run's key pairs (unless there: nodes of a running fleet keep theirs) and env.json."""
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)  # the user's own: what is in it says where to knock, and its keys let one in
        for folder in (self.nodes, self.spread, self.root / "logs"):
            folder.mkdir(exist_ok=True)
        if not (self.keys / "client.key").exists():
            self.keys.mkdir(mode=0o700, exist_ok=True)
            os.chmod(self.keys, 0o700)
            for name in ("client", "node"):
                public, secret = zmq.curve_keypair()
                write_private(self.keys / f"{name}.key", KeyPair(public=public, secret=secret).model_dump_json())
        if not self.evaluation_secret.exists():  # a folder made before it had none: added, the keys kept
            self.keys.mkdir(mode=0o700, exist_ok=True)
            write_private(self.evaluation_secret, secrets.token_hex(32) + "\n")
        write_atomic(self.env_file, json.dumps(env, indent=2))

    def key_pair(self, name: str) -> KeyPair:
        """``client`` or ``node``; refused when anyone but the owner could read it."""
        path = self.keys / f"{name}.key"
        try:
            mode = path.stat().st_mode
            text = path.read_text()
        except OSError as exc:
            raise FleetError(
                f"cannot read the run's {name} key {path} ({exc}): "
                "make the folder with `air fleet init DIR --config rl.toml`"
            ) from exc
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise FleetError(
                f"{path} is readable by others (mode {stat.S_IMODE(mode):o}): chmod 600 it, or make new keys"
            )
        try:
            return KeyPair.model_validate_json(text)
        except ValidationError as exc:
            raise FleetError(
                f"{path} is not a key pair `air fleet init DIR --config rl.toml` made: {exc.errors()[0]['msg']}"
            ) from exc

    def env_config(self) -> dict:
        try:
            env = json.loads(self.env_file.read_text())
        except (OSError, ValueError) as exc:
            raise FleetError(f"cannot read the env of this fleet, {self.env_file}: {exc}") from exc
        if not isinstance(env, dict) or not isinstance(env.get("taskset"), dict) or not env["taskset"].get("id"):
            raise FleetError(f'{self.env_file} names no taskset: expected {{"taskset": {{"id": ...}}}}')
        return env

    # -- node records ------------------------------------------------------------------------------------------

    def record_path(self, name: str) -> Path:
        return self.nodes / f"{name}.json"

    def publish(self, record: NodeRecord) -> None:
        write_atomic(self.record_path(record.name), record.model_dump_json())

    def withdraw(self, record: NodeRecord) -> None:
        """Remove the record if it is still this incarnation's (a newer start of the node keeps its own)."""
        path = self.record_path(record.name)
        try:
            if NodeRecord.model_validate_json(path.read_text()).incarnation == record.incarnation:
                path.unlink()
        except (OSError, ValidationError):
            pass

    def records(self) -> dict[str, NodeRecord]:
        """Every readable record; one half-written or malformed is skipped (it is rewritten whole)."""
        found = {}
        for path in sorted(self.nodes.glob("*.json")):
            try:
                record = NodeRecord.model_validate_json(path.read_text())
            except (OSError, ValidationError):
                continue
            found[record.name] = record
        return found


def write_atomic(path: Path, text: str, mode: int = 0o644) -> None:
    """Readers on other nodes see the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_private(path: Path, text: str) -> None:
    write_atomic(path, text, mode=0o600)
