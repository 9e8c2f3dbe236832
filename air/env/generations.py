"""Which generation of verifiers this environment holds, read from its metadata (importing it takes
seconds), and what only the classic one can run: `air standalone` and `air replay` drive
``vf.load_environment``, which verifiers 0.3+ (v1 only) no longer has."""

from __future__ import annotations

import importlib.metadata
from typing import Literal

Front = Literal["classic", "v1"]


def installed_verifiers() -> str | None:
    try:
        return importlib.metadata.version("verifiers")
    except importlib.metadata.PackageNotFoundError:
        return None


def installed_front() -> Front:
    from packaging.version import Version

    version = installed_verifiers()
    return "classic" if version is None or Version(version) < Version("0.3") else "v1"


def classic_only(what: str) -> str:
    """Why ``what`` cannot run with this verifiers (0.3+, v1 only), and where it can."""
    return (
        f"{what} needs the classic verifiers front (verifiers 0.1.x: the project's default .venv, which uv run "
        "uses); "
        f"this environment has verifiers {installed_verifiers()}, whose v1 envs run in prime-rl's env servers "
        "or vf-eval (`air policy-server` prints a vf-eval command for it)"
    )
