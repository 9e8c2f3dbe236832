"""Where prime-rl is installed, at which commit, and whether this project is installed into it.

prime-rl is not on PyPI: users clone it (``scripts/install_prime_rl.sh`` does, at the pinned commit)
and run its entry points from its own venv. Found, in order: ``--prime-rl DIR``, ``$PRIME_RL_DIR``,
a ``prime_rl`` package importable here, the install script's default ``~/prime-rl``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from air.launch.config_files import PRIME_RL_COMMIT

DEFAULT_DIR = Path("~/prime-rl")
CPU_VENV = ".venv-cpu"  # install_prime_rl.sh's venv for the CPU routes (prime-rl's own .venv untouched)
LEGACY_CPU_VENV = ".venv-orchestrator"  # its name before 2026-12-07: installs made then still work
ARCHIVE_MARKER = ".air-archive"  # written by prime_rl_side/install/from_archives.sh: the commit the tree came from


def cpu_venv(root: Path) -> Path:
    """The CPU routes' venv of the install at ``root`` (an older install's name where that is the one there)."""
    legacy = root / LEGACY_CPU_VENV
    return legacy if not (root / CPU_VENV).exists() and legacy.exists() else root / CPU_VENV


def same_commit(found: str | None, pin: str) -> bool:
    """``found`` names the commit ``pin`` does: either is a prefix of the other, at least 7 hex digits long
    (an archive records the commit as it was asked for, which may be shorter than the pin)."""
    if not found or len(found) < 7:
        return False
    return found.startswith(pin) or pin.startswith(found)


@dataclass(frozen=True)
class PrimeRlInstall:
    root: Path  # the checkout (holds pyproject.toml and .venv)
    source: str  # how it was found, for messages

    @property
    def venv(self) -> Path:
        """prime-rl's own ``.venv`` (``uv sync``: the GPU route), else the CPU routes' venv
        (``install_prime_rl.sh --cpu``, ``--cpu-trainer``, ``--orchestrator-only``), whichever holds a Python."""
        for venv in (self.root / ".venv", cpu_venv(self.root)):
            if (venv / "bin" / "python").exists():
                return venv
        return self.root / ".venv"

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def commit(self) -> str | None:
        """The checkout's HEAD commit; for a tree unpacked from a source archive (``install_prime_rl.sh
        --archives``) the commit it recorded; None when neither is there."""
        if not (self.root / ".git").exists() and (self.root / ARCHIVE_MARKER).is_file():
            return (self.root / ARCHIVE_MARKER).read_text().strip() or None
        try:
            out = subprocess.run(
                ["git", "-C", str(self.root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    def generation(self) -> str:
        """``v1`` for today's prime-rl (env servers, verifiers v1 tasksets), else ``classic``."""
        return "v1" if (self.root / "src" / "prime_rl" / "entrypoints" / "env_server.py").exists() else "classic"

    def at_pinned_commit(self) -> bool:
        return same_commit(self.commit(), PRIME_RL_COMMIT)

    def probe_venv(self, timeout: float = 30.0) -> dict[str, str | bool | None] | str:
        """What prime-rl's venv can import: versions of prime_rl's deps we rely on, or an error text."""
        if not self.python.exists():
            return f"no venv at {self.root}/.venv or {CPU_VENV} (run scripts/install_prime_rl.sh {self.root})"
        script = (
            "import json, importlib.metadata as m\n"
            "out = {}\n"
            "for name in ('verifiers', 'air-mlgym'):\n"
            "    try: out[name] = m.version(name)\n"
            "    except m.PackageNotFoundError: out[name] = None\n"
            "try:\n"
            "    import air_mlgym; out['air_mlgym'] = air_mlgym.__file__\n"
            "    out['v1_front'] = 'MLGymTaskset' in air_mlgym.__all__\n"
            "except Exception as e: out['air_mlgym'] = None; out['air_mlgym_error'] = repr(e)\n"
            "print(json.dumps(out))\n"
        )
        try:
            done = subprocess.run([str(self.python), "-c", script], capture_output=True, text=True, timeout=timeout)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"{self.python} did not answer: {exc}"
        if done.returncode != 0:
            return f"{self.python} failed: {done.stderr.strip()[-300:]}"
        try:
            return json.loads(done.stdout.strip().splitlines()[-1])
        except (json.JSONDecodeError, IndexError):
            return f"{self.python} printed {done.stdout[-200:]!r}"


def find_prime_rl(explicit: str | os.PathLike[str] | None = None) -> PrimeRlInstall | None:
    candidates: list[tuple[Path, str]] = []
    if explicit:
        candidates.append((Path(explicit).expanduser(), "--prime-rl"))
    if os.environ.get("PRIME_RL_DIR"):
        candidates.append((Path(os.environ["PRIME_RL_DIR"]).expanduser(), "$PRIME_RL_DIR"))
    spec = importlib.util.find_spec("prime_rl")
    if spec is not None and spec.origin:
        for parent in Path(spec.origin).resolve().parents:  # src/prime_rl/__init__.py -> the checkout
            if (parent / "pyproject.toml").exists():
                candidates.append((parent, "importable prime_rl"))
                break
    candidates.append((DEFAULT_DIR.expanduser(), f"the default {DEFAULT_DIR}"))
    for root, source in candidates:
        if (root / "pyproject.toml").exists() and (root / "src" / "prime_rl").is_dir():
            return PrimeRlInstall(root.resolve(), source)
        if source in ("--prime-rl", "$PRIME_RL_DIR"):
            return PrimeRlInstall(root.resolve(), source)  # named explicitly: report what is wrong with it
    return None
