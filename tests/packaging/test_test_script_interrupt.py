"""Ctrl-C during `bash scripts/test.sh` stops it (issue 53): the classic run ends (pytest exits 2 when
interrupted) and the v1 run never starts; the script exits 130. Ctrl-C is what a terminal sends: SIGINT to
the whole foreground process group, sent here once the classic run's pytest has printed its header."""

from __future__ import annotations

import os
import re
import signal
import subprocess

from tests.live_output import lines_as_they_come
from tests.printed_hints import REPO

BACKSTOP_S = 900  # only against a hang of the test itself; each step waits on output, not on a clock
# One cheap classic test; the signal lands while pytest still collects the suite (seconds, whatever the load).
SELECTION = ["-n", "0", "-p", "no:cacheprovider", "-k", "test_each_check_is_announced_before_its_rows"]


def test_ctrl_c_stops_the_script_before_the_v1_run() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIR_", "PYTEST_"))}
    env["PYTHONUNBUFFERED"] = "1"  # pytest's header as it prints it, not when its buffer fills
    process = subprocess.Popen(
        ["bash", "scripts/test.sh", *SELECTION],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own group, as a terminal's foreground job: Ctrl-C signals the group
    )
    lines = lines_as_they_come(process)
    seen: list[str] = []
    signalled = False
    try:
        while (line := lines.get(timeout=BACKSTOP_S)) is not None:
            seen.append(line)
            if not signalled and "test session starts" in line:
                assert any(s.startswith("==> classic front") for s in seen), seen
                os.killpg(process.pid, signal.SIGINT)
                signalled = True
            if line.startswith("==> v1 front"):
                break  # the defect: the script went on; stop it here rather than run the v1 suite
        status = process.wait(timeout=BACKSTOP_S) if line is None else None
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    out = "\n".join(seen)
    assert signalled, f"pytest's header never came:\n{out}"
    assert not any(s.startswith("==> v1 front") for s in seen), f"the v1 run started after Ctrl-C:\n{out}"
    assert status == 130, f"exit {status}:\n{out}"
    # pytest exits 2, or dies of a second SIGINT (uv forwards one beside the group's): 130 as bash reports it.
    assert any(re.fullmatch(r"==> interrupted: the classic run ended with exit (2|130); no further run started", s)
               for s in seen), out  # fmt: skip
