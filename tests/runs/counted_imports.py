"""`air standalone` run in a fresh process that reports, with its exit status and stderr, which heavy
modules it had imported when it returned: how the tests see that an error came before the env's stack."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from rigs.patience import backstop

HEAVY = ("verifiers", "openai", "docker", "datasets", "torch", "transformers", "pandas", "streamlit")

_PROBE = f"""
import contextlib, io, json, sys
from air.cli.main import main
err = io.StringIO()
with contextlib.redirect_stderr(err):
    code = main(sys.argv[1:])
heavy = sorted(m for m in {HEAVY!r} if m in sys.modules)
print(json.dumps({{"code": code, "err": err.getvalue(), "heavy": heavy}}))
"""


def standalone_counting_imports(*args: str, cwd: Path) -> dict:
    """``{"code": exit status, "err": stderr, "heavy": the HEAVY modules imported}``."""
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, "standalone", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=backstop(120),
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])
