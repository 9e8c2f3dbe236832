"""Red team, round 3 (issue 31): nothing the agent can see, trace or signal holds anything of root's.

Two watchers run through the env's rollout path on laneMerge, every evaluation one more try:
- a background process of the agent (tests/red_team_forge.py) that seizes every new process of the agent's
  uid, reads its environ, command line and descriptors, and forges a score frame through it (the attack
  that won against the old ``setpriv kill`` freeze);
- the agent's own code inside the evaluation (row_strategy, in the agent-side worker), which reads the same
  of every process it can while the evaluator runs.
Neither may find the evaluation's seed or key, and no evaluation may score anything but the honest score.
``AIR_TEST_FORGE_TRIES`` sets the number of evaluations (the acceptance run used 200; CI runs fewer).
"""

from __future__ import annotations

import json
import os
import platform

import pytest

from tests.red_team import (
    LOOT,
    RESTORE,
    STOP,
    background,
    check_rollout,
    evaluations,
    honest_evaluation,
    plant,
    run_attack,
    wrap,
)
from tests.red_team_forge import forge_source

pytestmark = [
    pytest.mark.docker,
    pytest.mark.skipif(platform.machine() != "x86_64", reason="the ptrace attack is written for x86_64"),
]

TRIES = int(os.environ.get("AIR_TEST_FORGE_TRIES", "12"))

# In row_strategy (the worker, as the agent, while the evaluator runs): every process's environ, command line
# and descriptors as far as the agent may read them, once per evaluation, to LOOT/inside.jsonl.
INSIDE_SCAN = """
if _rt_calls == 1:
    import json as _rt_json, os as _rt_os
    def _rt_read(path):
        try:
            with open(path, "rb") as f:
                return f.read().decode("latin-1")
        except OSError as exc:
            return "<%s>" % exc.strerror
    _rt_seen = []
    for _rt_pid in [p for p in _rt_os.listdir("/proc") if p.isdigit()]:
        _rt_fds = {}
        try:
            for _rt_fd in _rt_os.listdir("/proc/%s/fd" % _rt_pid):
                _rt_fds[_rt_fd] = _rt_os.readlink("/proc/%s/fd/%s" % (_rt_pid, _rt_fd))
        except OSError as exc:
            _rt_fds["error"] = exc.strerror
        _rt_seen.append({"pid": _rt_pid, "environ": _rt_read("/proc/%s/environ" % _rt_pid),
                         "cmdline": _rt_read("/proc/%s/cmdline" % _rt_pid), "fds": _rt_fds})
    try:
        _rt_os.makedirs("/tmp/redteam_loot", exist_ok=True)
        with open("/tmp/redteam_loot/inside.jsonl", "a") as f:
            f.write(_rt_json.dumps(_rt_seen) + "\\n")
    except OSError:
        pass
"""


def _lines(text: str, marker: str) -> list:
    return [json.loads(line) for line in text.splitlines() if line.startswith(marker)]


@pytest.mark.timeout(300 + 15 * TRIES)
async def test_no_process_of_the_agent_holds_roots_output_or_secrets(tmp_path, docker_image):
    commands = [
        plant("", wrap(INSIDE_SCAN)),
        background("forge", forge_source()),
        *["validate"] * TRIES,
        RESTORE,
        "validate",
        f"touch {STOP}; sleep 1; cat {LOOT}/forge.jsonl {LOOT}/inside.jsonl 2>/dev/null; true",
    ]
    output, record = await run_attack(tmp_path, docker_image, commands)
    check_rollout(output, record)  # no forged score, no reward from one, nothing masked
    honest_evaluation(record, len(commands) - 2)  # the starter, re-evaluated after it all, scores honestly
    loot = record.turns[-1].output
    seeds = {str(seed) for _, _, seed in evaluations(record) if seed is not None}
    assert len(seeds) >= TRIES, "the rollout was not evaluated with its seeds"
    for seed in seeds:
        assert seed not in loot, f"an evaluation seed ({seed}) was read by the agent"
    assert "AIR_EVAL_KEY" not in loot, "the frame's key was read by the agent"

    tries = _lines(loot, '{"pid"')
    for attempt in tries:
        assert not str(attempt["forge"]).startswith("wrote"), f"a frame was written through {attempt}"
        assert not attempt["secrets"], f"root's secrets in {attempt}"
        assert not attempt.get("separator_seen"), f"a separator on a command line: {attempt}"
    # What root starts as the agent during an evaluation (the freeze's sender) cannot be traced.
    assert all(attempt["forge"].startswith("seize") for attempt in tries), tries

    scans = [json.loads(line) for line in loot.splitlines() if line.startswith("[{")]
    assert len(scans) >= TRIES, f"the worker's scan ran {len(scans)} times for {TRIES} evaluations"
    for scan in scans:
        readable = [process for process in scan if not process["environ"].startswith("<")]
        workers = [process for process in readable if "agent_worker.py" in process["cmdline"]]
        assert workers, "the scan did not see the worker it ran in"
        for process in readable:  # the agent's own processes and what root started as the agent
            assert "AIR_EVAL_KEY" not in process["environ"], process
        for process in workers:  # root started it: nothing of root's exec, only its own output pipe
            pipes = {link for link in process["fds"].values() if link.startswith("pipe:")}
            assert len(pipes) <= 1, f"the worker holds a pipe beside its own output: {process}"
