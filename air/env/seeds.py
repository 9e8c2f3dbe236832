"""Each rollout's evaluation seed: the same for every rollout of a group, and unpredictable to the agent.

MLGym's games (and any evaluator that draws from ``random`` or ``numpy.random`` unseeded) score the same
submission differently from one evaluation to the next: within a GRPO group that noise is a gradient.
So every rollout of a group evaluates under one seed, derived here on the host; the evaluation passes it to
the evaluator out of the agent's sight (tasks/workspace, scripts/eval_runner.py) and the trajectory records it,
so ``air replay`` reproduces the scores.

The seed is an HMAC of the env's ``seed``, the task and the group under the host's evaluation secret: every
other input is public (the agent can read our code in its container and guess the group and the count of
evaluations), so without the secret an agent that knows the code recomputed a game's dice and planned each
match (issue 50). The secret is 32 random bytes in a file only its owner reads, never in a container, on a
command line or in a trajectory: ``evaluation_secret_file``, else ``<state>/evaluation.secret`` (made on first
use; state is $AIR_STATE_DIR, $XDG_STATE_HOME/air or ~/.local/state/air). One secret and one ``seed`` give the
same seeds on any machine, so a run reproduces where its secret is given; the env nodes of a fleet share the
one in its folder's ``keys/``.

What a group is depends on who runs the env:
- ``air standalone`` (and any runner that sets ``info.group_id``): the group's own id.
- prime-rl c87c19b (classic ``env.run_group``) and today's prime-rl (v1 ``env.run(task_data)``) hand the
  env no group key: a group is ``rollouts_per_example`` copies of one example, so the key is the example.
  Rollouts of one group share their seed; so do the groups of the same example at other steps.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from air.env.settings import MLGymEnvSettings

SECRET_FILE_NAME = "evaluation.secret"
SECRET_BYTES = 32


class EvaluationSecretError(ValueError):
    """The evaluation secret's file cannot be used; the message names it and the fix."""


def group_key(info: Mapping[str, Any] | None, example_id: Any) -> str:
    """The key a group's rollouts share: the runner's group id, else the dataset example."""
    group_id = (info or {}).get("group_id")
    return f"group/{group_id}" if group_id is not None else f"example/{example_id}"


def rollout_seed(settings: MLGymEnvSettings, secret: bytes, task_name: str, key: str) -> int:
    """The evaluation seed of a rollout of ``task_name`` in group ``key`` (64 bits: the agent's code sees a 32-bit
    seed derived from each evaluation's, and 2^32 guesses must not lead back to this one)."""
    if settings.evaluation_seed is not None:
        return settings.evaluation_seed
    message = f"air-group/{settings.seed}/{task_name}/{key}".encode()
    return int.from_bytes(hmac.new(secret, message, hashlib.sha256).digest()[:8], "big")


def default_secret_file() -> Path:
    """``<state>/evaluation.secret``: the state folder of air's process records (training/process_records)."""
    state = os.environ.get("AIR_STATE_DIR") or (
        Path(os.environ["XDG_STATE_HOME"]) / "air" if os.environ.get("XDG_STATE_HOME") else None
    )
    return Path(state or Path.home() / ".local" / "state" / "air") / SECRET_FILE_NAME


def secret_fingerprint(secret: bytes) -> str:
    """A short name for a secret (which one a run used, to find it again), from which it cannot be found."""
    return hashlib.sha256(b"air-secret-name/" + secret).hexdigest()[:12]


def load_secret(path: str | Path | None = None) -> tuple[bytes, Path]:
    """The secret in ``path`` (which must exist), else in the default file, made there on first use."""
    if path is not None:
        return _read_secret(Path(path).expanduser(), given=True), Path(path).expanduser()
    default = default_secret_file()
    if not default.exists():
        _create_secret(default)
    return _read_secret(default, given=False), default


def _create_secret(path: Path) -> None:
    """32 random bytes, owner-only; written aside and linked in, so that processes starting at once all read
    the one that won (a link never replaces a file)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    aside = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_hex(SECRET_BYTES) + "\n")
        try:
            os.link(aside, path)
        except FileExistsError:
            pass  # another process made it first: read theirs
    finally:
        aside.unlink(missing_ok=True)


def _read_secret(path: Path, *, given: bool) -> bytes:
    where = "evaluation_secret_file" if given else "the default evaluation secret"
    try:
        mode = path.stat().st_mode
        text = path.read_text().strip()
    except OSError as exc:
        raise EvaluationSecretError(
            f"cannot read {where} {path}: {exc.strerror or exc} (give a file of 64 hex digits, readable by you only; "
            "`python3 -c 'import secrets; print(secrets.token_hex(32))' > FILE && chmod 600 FILE` makes one)"
        ) from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise EvaluationSecretError(
            f"{where} {path} is readable by others (mode {stat.S_IMODE(mode):o}): `chmod 600 {path}`, or make a new one"
        )
    try:
        secret = bytes.fromhex(text)
    except ValueError:
        secret = b""
    if len(secret) < 16:
        raise EvaluationSecretError(
            f"{where} {path} does not hold a secret: expected 64 hex digits (at least 32), found {len(text)} characters"
        )
    return secret
