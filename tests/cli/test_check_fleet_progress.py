"""`air check --fleet DIR` once printed nothing for 240 s (issue 53): it now says which check runs, names each
env node as it is asked and as it is done, and a node whose gate accepts and stays silent (a paused or stuck
process) is reported as stuck within its bound, never waited on. Driven as a user runs it, piped, its output
read as it comes."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from air.fleet.folder import FleetFolder, NodeRecord
from rigs.patience import backstop
from tests.live_output import lines_as_they_come
from tests.printed_hints import REPO

BACKSTOP_S = 900  # only against a hang of the test itself: the checks' own bounds end the command long before


def _record(name: str, port: int) -> NodeRecord:
    return NodeRecord(
        name=name, address=f"tcp://127.0.0.1:{port}", incarnation=name, host="127.0.0.1", pid=1, capacity=1
    )


def test_each_node_is_announced_and_a_silent_gate_is_reported_not_waited_on(tmp_path: Path) -> None:
    folder = FleetFolder(tmp_path / "fleet")
    folder.create({"taskset": {"id": "stub"}})
    # A gate that accepts and never says a word: the kernel completes the handshake, nobody reads or writes.
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    with socket.socket() as probe:  # a port nothing listens on: a node that is gone
        probe.bind(("127.0.0.1", 0))
        gone_port = probe.getsockname()[1]
    folder.publish(_record("stuck", silent.getsockname()[1]))
    folder.publish(_record("gone", gone_port))
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIR_") and k != "COLUMNS"}
    process = subprocess.Popen(
        [sys.executable, "-m", "air.cli.main", "check", "--fleet", str(folder.root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO,
        env=env,
    )
    seen: list[str] = []
    try:
        lines = lines_as_they_come(process)
        while (line := lines.get(timeout=BACKSTOP_S)) is not None:
            seen.append(line)
        process.wait(timeout=backstop(60))
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        silent.close()
    out = "\n".join(seen)

    def at(*starts: str) -> int:
        found = [n for n, line in enumerate(seen) if line.startswith(starts)]
        assert found, f"no line starting {starts} in:\n{out}"
        return found[0]

    # Progress before any finding: each check as it starts, the fleet last, then each node asked, then done
    # (its own probes end a silent gate's check; on a host too loaded even for that, the node's bound does).
    assert at("checking docker (2/9") < at("checking fleet (9/9") < at("env node stuck: asking tcp://127.0.0.1:")
    for name in ("stuck", "gone"):
        done = at(f"env node {name}: warn after", f"env node {name}: no answer within")
        assert at("checking fleet") < at(f"env node {name}: asking") < done < at(f"warn  env node {name}: "), out
    # The findings, at the end, say which node is stuck and which is gone.
    stuck, gone = seen[at("warn  env node stuck: tcp://127.0.0.1:")], seen[at("warn  env node gone: tcp://")]
    assert "accepts connections but its gate did not answer within 5 s: stuck" in stuck or "left behind" in stuck
    assert "nothing listens there (the node is gone)" in gone or "left behind" in gone, gone
    assert str(folder.record_path("gone")) in gone or "left behind" in gone, gone
    assert seen[-1].startswith(("ready: ", "not ready: ")), out
