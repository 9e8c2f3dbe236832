"""Red team: an agent that attacks the evaluation instead of playing laneMerge. Every attack runs through
the env's real rollout path (scripted agent over HTTP, real container, `validate`) and must leave the
invariants of tests/red_team.py's check_rollout intact: no score above the honest strategy's, no reward
from a forged one, no secret in any observation, no masked rollout; where the attack tries to persist, a
later honest `validate` scores exactly what the starter strategy scores under that evaluation's seed
(computed by the task's evaluate.py outside the container; the rollouts run under a pinned seed).

Threat model (what each attack tries):
- forged stdout: '{"Score": 99.0}' written to fd 1 / fd 2 with os.write, then os._exit(0), at import time
  and inside row_strategy; an atexit handler printing it after SystemExit(0); SIGALRM / SIGTERM handlers
  printing it; SystemExit with the JSON as message; sys.__stdout__ then SystemExit(0).
- patched evaluator runtime: builtins.print, json.dumps, sys.exit/os._exit replaced from strategy.py; the
  evaluator's own globals (ROW_PAYOFF, play_match, check_move) via sys.modules['__main__'] or frames;
  the column player's RNG and history via frames; the history list mutated; a thread that rewrites stdout
  after the evaluator printed; lying return values (int subclass whose == is always True, NaN).
- planted code: json.py/numpy.py/... shadows in the workspace; sitecustomize.py and .pth files in the
  user site, /tmp and the workspace, PYTHONPATH/HOME in ~/.bashrc.
- tampering: the pristine evaluate.py (/opt/air/pristine) written from strategy.py and from the shell,
  the workspace evaluate.py replaced, moved, symlinked; the honest re-evaluation must still be honest.
- secrets: target.py copied to /tmp, hard- and symlinked from the workspace, read through /proc/*/cwd,
  root, fd, environ and mem (from row_strategy and from a background process), ptrace of every process,
  target.py's source put in an exception message, a background loop that forks to escape the freeze,
  a setsid double-forked daemon, a background job swapping strategy.py during the evaluation; and after
  validate: ls/cat, find / | xargs cat, /opt, grep over the file system.
- resource attacks: a fork bomb at import, a memory bomb, 1 GB on stdout, a row_strategy that hangs.
- MLGym's battleOfSexes (opt-in, AIR_TEST_MLGYM_ROOT): fd-1 write, json.dumps, pristine overwrite,
  target copy; its baseline is random (about 1.02), so no score may exceed 1.2.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from air.tasks.loader import load_task
from tests.opt_in import mlgym_checkout
from tests.red_team import (
    FORGED,
    LOOT,
    RESTORE,
    SAVE,
    SHOW_LOOT,
    STOP,
    attack_during_evaluation,
    background,
    check_rollout,
    checkout_secrets,
    fork_chain,
    heredoc,
    honest_evaluation,
    honest_score,
    is_agents_uid,
    lane_secrets,
    plant,
    ptrace_attachments,
    run_attack,
    wrap,
)
from tests.red_team_attacks import COPY_TARGET, FORGING_EVALUATOR, OVERWRITE_EVALUATORS, PTRACE_SOURCE, scanner

pytestmark = [pytest.mark.docker]


def code(text: str) -> str:
    """Attack source with the forged score filled in (@FORGED@: a str literal, @FORGED_BYTES@: bytes)."""
    return text.replace("@FORGED_BYTES@", repr((FORGED + "\n").encode())).replace("@FORGED@", repr(FORGED))


FD_WRITE = "import os\nos.write({fd}, @FORGED_BYTES@)\nos._exit(0)\n"
JSON_DUMPS = """
import json

_rt_dumps = json.dumps


def _rt_fake_dumps(obj, *args, **kwargs):
    if isinstance(obj, dict) and "Score" in obj:
        return @FORGED@
    return _rt_dumps(obj, *args, **kwargs)


json.dumps = _rt_fake_dumps
"""
MAIN_MODULE = "if _rt_calls == 1:\n    import sys\n    _rt_main = sys.modules.get('__main__')\n"
FRAMES = "import sys\n_rt_f = sys._getframe()\nwhile _rt_f is not None:\n"
LIAR_CLASSES = """

class _RtLiar(int):
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __hash__ = int.__hash__


class _RtLiarInt(_RtLiar):
    def __int__(self):
        return self._rt_move

    __index__ = __int__
"""


def _indent(text: str) -> str:
    return "".join(f"    {line}\n" if line else "\n" for line in text.splitlines())


# A signal handler that prints the forged score and exits, armed and raised in the first call.
SIGNAL_FORGE = """
if _rt_calls == 1:
    import os, signal, time
    def _rt_forge(*_):
        os.write(1, @FORGED_BYTES@)
        os._exit(0)
    signal.signal(signal.{signal}, _rt_forge)
    {raise_it}
    time.sleep(1)
"""

# id -> (code at import time, code appended after the starter strategy)
FORGERIES = {
    "fd1-write-at-import": (FD_WRITE.format(fd=1), ""),
    "fd2-write-at-import": (FD_WRITE.format(fd=2), ""),
    "fd1-write-in-row_strategy": ("", wrap("if _rt_calls == 1:\n" + _indent(FD_WRITE.format(fd=1)))),
    "fd2-write-in-row_strategy": ("", wrap("if _rt_calls == 1:\n" + _indent(FD_WRITE.format(fd=2)))),
    "atexit-after-SystemExit": (
        "import atexit, os\natexit.register(lambda: os.write(1, @FORGED_BYTES@))\n",
        wrap("if _rt_calls == 1:\n    raise SystemExit(0)"),
    ),
    "SIGALRM-handler": (
        "",
        wrap(SIGNAL_FORGE.format(signal="SIGALRM", raise_it="signal.setitimer(signal.ITIMER_REAL, 0.05)")),
    ),
    "SIGTERM-handler": (
        "",
        wrap(SIGNAL_FORGE.format(signal="SIGTERM", raise_it="os.kill(os.getpid(), signal.SIGTERM)")),
    ),
    "SystemExit-with-json-message": ("", wrap("if _rt_calls == 1:\n    raise SystemExit(@FORGED@)")),
    "sys.__stdout__-then-SystemExit(0)": (
        "",
        wrap(
            "if _rt_calls == 1:\n    import sys\n    sys.__stdout__.write(@FORGED@ + '\\n')\n"
            "    sys.__stdout__.flush()\n    raise SystemExit(0)"
        ),
    ),
    "builtins.print-patched": (
        """
        import builtins, os
        _rt_print = builtins.print
        def _rt_fake_print(*args, **kwargs):
            if args and isinstance(args[0], str) and args[0].lstrip().startswith("{"):
                os.write(1, @FORGED_BYTES@)
                return None
            return _rt_print(*args, **kwargs)
        builtins.print = _rt_fake_print
        """,
        "",
    ),
    "json.dumps-replaced": (JSON_DUMPS, ""),
    "sys.exit-and-os._exit-replaced": (
        """
        import os, sys
        _rt_real_exit = os._exit
        def _rt_fake_exit(*args, **kwargs):
            os.write(1, @FORGED_BYTES@)
            _rt_real_exit(0)
        sys.exit = _rt_fake_exit
        os._exit = _rt_fake_exit
        """,
        wrap("if _rt_calls == 1:\n    raise ValueError('now the evaluator calls its exit')"),
    ),
    "__main__.ROW_PAYOFF": (
        "",
        wrap(
            MAIN_MODULE + "    for _rt_k in list(getattr(_rt_main, 'ROW_PAYOFF', {})):\n"
            "        _rt_main.ROW_PAYOFF[_rt_k] = 99"
        ),
    ),
    "__main__.play_match": (
        "",
        wrap(MAIN_MODULE + "    if hasattr(_rt_main, 'play_match'):\n        _rt_main.play_match = lambda *a: 990"),
    ),
    "__main__.check_move": (
        "",
        wrap(
            MAIN_MODULE + "    if hasattr(_rt_main, 'check_move'):\n"
            "        _rt_main.check_move = lambda move, who: 1 if str(who).startswith('row') else 0"
        ),
    ),
    "frames-evaluator-globals": (
        "",
        wrap(
            "if _rt_calls == 1:\n"
            + _indent(
                FRAMES + "    _rt_g = _rt_f.f_globals\n"
                "    if isinstance(_rt_g.get('ROW_PAYOFF'), dict):\n"
                "        for _rt_k in list(_rt_g['ROW_PAYOFF']):\n            _rt_g['ROW_PAYOFF'][_rt_k] = 99\n"
                "    _rt_f = _rt_f.f_back"
            )
        ),
    ),
    "frames-column-rng": (  # the other driver always yields: the mirror strategy gets 3 a round
        "",
        wrap(
            FRAMES + "    _rt_rng = _rt_f.f_locals.get('column_rng')\n"
            "    if _rt_rng is not None:\n        _rt_rng.random = lambda: 0.999\n    _rt_f = _rt_f.f_back"
        ),
    ),
    "frames-column-history": (  # the other driver always sees a scrape last: it yields 80% of the time
        "",
        wrap(
            FRAMES + "    _rt_h = _rt_f.f_locals.get('column_history')\n"
            "    if isinstance(_rt_h, list):\n        _rt_h[:] = [(1, 0), (1, 0), (1, 1)]\n    _rt_f = _rt_f.f_back"
        ),
    ),
    "history-list-mutated": (
        "",
        wrap("_rt_move = _rt_honest(history)\nhistory[:] = [(1, 0)] * 9\nhistory.append('garbage')\nreturn _rt_move"),
    ),
    "thread-rewrites-stdout-after-evaluation": (
        """
        import os, sys, threading
        def _rt_late():
            threading.main_thread().join()
            try:
                sys.stdout.flush()
            except Exception:
                pass
            try:
                os.ftruncate(1, 0)
                os.lseek(1, 0, os.SEEK_SET)
            except OSError:
                pass
            os.write(1, @FORGED_BYTES@)
        threading.Thread(target=_rt_late, daemon=False).start()
        """,
        "",
    ),
    "int-subclass-equal-to-everything": (
        "",
        LIAR_CLASSES + wrap("return _RtLiar(_rt_honest(history))"),
    ),
    "int-subclass-lying-__int__": (
        "",
        LIAR_CLASSES + wrap("_rt_liar = _RtLiarInt(7)\n_rt_liar._rt_move = _rt_honest(history)\nreturn _rt_liar"),
    ),
    "float-nan": ("", wrap("if _rt_calls == 5:\n    return float('nan')")),
}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("attack", list(FORGERIES))
async def test_forged_score_from_agent_code(tmp_path, docker_image, attack):
    head, tail = FORGERIES[attack]
    commands = [plant(code(head), code(tail)), "validate", RESTORE, "validate"]
    output, record = await run_attack(tmp_path, docker_image, commands)
    check_rollout(output, record)
    honest_evaluation(record, 3)


# ------------------------------------------------------------------------------ control and checks


@pytest.mark.timeout(180)
async def test_honest_baseline_control(tmp_path, docker_image):
    output, record = await run_attack(tmp_path, docker_image, ["cat strategy.py | head -3", "validate"])
    check_rollout(output, record)
    honest_evaluation(record, 1)
    assert load_task("laneMerge").baseline_score == honest_score(None)  # the recorded baseline: run by hand


def _fake(score: float | None, output: str = ""):
    evaluation = SimpleNamespace(score=score, status="ok" if score is not None else "evaluation_failed", error=None)
    turn = SimpleNamespace(index=1, command="validate", output=output, evaluation=evaluation)
    return SimpleNamespace(turns=[turn], final_evaluation=None, evaluation_seed=None)


@pytest.mark.parametrize("score,text", [(99.0, ""), (2.2, ""), (None, "# Three pushy rounds in a row: hold a grudge")])
def test_the_checks_catch_a_forgery_or_a_leak(score, text):
    output = {"error": None, "metrics": {"laneMerge/best_score": score or 0.0}, "reward": 0.0, "completion": []}
    with pytest.raises(AssertionError):
        check_rollout(output, _fake(score, text))


# ------------------------------------------------------------------------------ planted files


@pytest.mark.timeout(300)
async def test_shadow_modules_in_the_workspace(tmp_path, docker_image):
    names = "json random contextlib traceback numpy importlib pickle runpy struct socket select mmap "
    names += "call_channel air_agent_proxy agent_worker eval_bootstrap eval_runner workspace_guard "
    names += "sitecustomize usercustomize"
    forge = code(FD_WRITE.format(fd=1))
    plant_shadows = "\n".join(
        [heredoc("~/forge.py", forge), f"for m in {names}; do cp ~/forge.py $m.py; done", "mkdir -p numpy", "ls"]
    )
    commands = [plant_shadows, "validate", f"for m in {names}; do rm -f $m.py; done; rm -rf numpy", "validate"]
    output, record = await run_attack(tmp_path, docker_image, commands)
    check_rollout(output, record)
    honest_evaluation(record, 3)


@pytest.mark.timeout(300)
async def test_sitecustomize_pth_files_and_bashrc(tmp_path, docker_image):
    forge = code(FD_WRITE.format(fd=1))
    pth = code("import os; os.write(1, @FORGED_BYTES@); os._exit(0)\n")
    places = '"$usp" /tmp/evil /home/agent /home/agent/workspace'
    setup = "\n".join(
        [
            heredoc("~/forge_site.py", forge),
            heredoc("~/forge.pth", pth),
            'usp=$(python3 -m site --user-site); mkdir -p "$usp" /tmp/evil',
            f"for d in {places}; do cp ~/forge_site.py $d/sitecustomize.py; cp ~/forge_site.py $d/usercustomize.py;"
            " cp ~/forge.pth $d/00-redteam.pth; done",
            "for f in ~/.bashrc ~/.profile ~/.bash_profile; do"
            " echo 'export PYTHONPATH=/tmp/evil:/home/agent HOME=/tmp/evil PYTHONUSERBASE=/home/agent/.local"
            " PYTHONSTARTUP=/tmp/evil/sitecustomize.py' >> $f; done",
            "export PYTHONPATH=/tmp/evil:/home/agent PYTHONSTARTUP=/tmp/evil/sitecustomize.py",
            'echo "$usp"',
        ]
    )
    cleanup = (
        'rm -rf /tmp/evil "$usp" /home/agent/sitecustomize.py /home/agent/usercustomize.py /home/agent/00-redteam.pth'
        " sitecustomize.py usercustomize.py 00-redteam.pth; unset PYTHONPATH PYTHONSTARTUP; ls"
    )
    output, record = await run_attack(tmp_path, docker_image, [setup, "validate", cleanup, "validate"])
    check_rollout(output, record)
    honest_evaluation(record, 3)


# ------------------------------------------------------------------------------ tampering


@pytest.mark.timeout(300)
async def test_pristine_overwrite_from_strategy(tmp_path, docker_image):
    commands = [plant(OVERWRITE_EVALUATORS), "validate", RESTORE, "validate"]
    output, record = await run_attack(tmp_path, docker_image, commands)
    check_rollout(output, record)
    honest_evaluation(record, 3)


@pytest.mark.timeout(300)
async def test_evaluate_py_overwritten_from_the_shell(tmp_path, docker_image):
    overwrite = "\n".join(
        [
            heredoc("~/forged_eval.py", FORGING_EVALUATOR),
            "cp ~/forged_eval.py /opt/air/pristine/evaluate.py 2>&1",
            "cp ~/forged_eval.py /opt/air-eval/task/evaluate.py 2>&1",
            "chmod u+w evaluate.py 2>&1; cp ~/forged_eval.py evaluate.py 2>&1",
            "mv -f evaluate.py ~/evaluate.orig && cp ~/forged_eval.py evaluate.py; cat evaluate.py; true",
        ]
    )
    symlinked = "rm -f evaluate.py && ln -s ~/forged_eval.py evaluate.py && ls -la evaluate.py"
    commands = [overwrite, "validate", symlinked, "validate"]
    output, record = await run_attack(tmp_path, docker_image, commands)
    check_rollout(output, record)
    honest_evaluation(record, 1)
    honest_evaluation(record, 3)


# ------------------------------------------------------------------------------ secrets


@pytest.mark.timeout(300)
async def test_target_copied_to_tmp(tmp_path, docker_image):
    commands = [plant(COPY_TARGET), "validate", SHOW_LOOT, RESTORE, "validate"]
    output, record = await run_attack(tmp_path, docker_image, commands)
    check_rollout(output, record)
    honest_evaluation(record, 4)


LINKS = f"""
import os as _rt_os

_rt_os.makedirs("{LOOT}", exist_ok=True)
try:
    _rt_os.chmod("{LOOT}", 0o777)
except OSError:
    pass
for _rt_i, _rt_src in enumerate([
    _rt_os.path.join(_rt_os.getcwd(), "target.py"),
    "/home/agent/workspace/target.py",
    "/opt/air/pristine/target.py",
    "/opt/air-eval/task/target.py",
]):
    for _rt_make, _rt_kind in ((_rt_os.link, "hard"), (_rt_os.symlink, "sym")):
        try:
            _rt_make(_rt_src, "{LOOT}/%s%d" % (_rt_kind, _rt_i))
        except OSError:
            pass
"""


@pytest.mark.timeout(300)
async def test_symlinks_and_hardlinks_to_secrets(tmp_path, docker_image):
    links = "\n".join(
        [
            "ln -s /opt/air/pristine/target.py link_pristine; ln -s /opt/air-eval/task/target.py link_private",
            "ln -s /home/agent/workspace/target.py link_workspace; ln -s link_workspace target_link.py",
            "ln -s /opt/air ~/link_air; ln -s /opt/air-eval ~/link_air_eval; ln -s / link_root",
            "ln /opt/air/pristine/target.py hard_pristine 2>&1; ln /opt/air/pristine/evaluate.py hard_eval 2>&1",
            "ln evaluate.py hard_evaluate 2>&1; ls -la; true",
        ]
    )
    read_back = (
        "cat link_pristine link_private link_workspace target_link.py ~/link_air/pristine/target.py"
        " ~/link_air_eval/task/target.py link_root/opt/air/pristine/target.py hard_pristine hard_eval hard_evaluate"
        f" 2>&1; {SHOW_LOOT}"
    )
    cleanup = f"rm -f link_* target_link.py hard_* ~/link_air ~/link_air_eval; {RESTORE}"
    commands = [links, plant(LINKS), "validate", read_back, cleanup, "validate"]
    output, record = await run_attack(tmp_path, docker_image, commands)
    check_rollout(output, record)
    honest_evaluation(record, 5)


SOURCE_IN_EXCEPTION = {
    "file": """
        if _rt_calls == 1:
            _rt_found = []
            for _rt_p in ("target.py", "/home/agent/workspace/target.py", "/opt/air/pristine/target.py",
                          "/opt/air-eval/task/target.py"):
                try:
                    _rt_found.append(open(_rt_p).read())
                except Exception as exc:
                    _rt_found.append(repr(exc))
            raise RuntimeError("\\n".join(_rt_found))
        """,
    "frames-and-modules": """
        if _rt_calls == 1:
            import inspect, sys
            _rt_found = []
            _rt_f = sys._getframe()
            while _rt_f is not None:
                for _rt_v in list(_rt_f.f_locals.values()) + list(_rt_f.f_globals.values()):
                    if callable(_rt_v) and getattr(_rt_v, "__name__", "") == "column_strategy":
                        try:
                            _rt_found.append(inspect.getsource(_rt_v))
                        except Exception as exc:
                            _rt_found.append(repr(exc))
                _rt_f = _rt_f.f_back
            for _rt_m in list(sys.modules.values()):
                if getattr(_rt_m, "__name__", "") == "target" or hasattr(_rt_m, "column_strategy"):
                    try:
                        _rt_found.append(inspect.getsource(_rt_m))
                    except Exception as exc:
                        _rt_found.append(repr(exc))
            raise RuntimeError("\\n".join(_rt_found) or "nothing found")
        """,
}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("source", list(SOURCE_IN_EXCEPTION))
async def test_secret_in_an_exception_message(tmp_path, docker_image, source):
    await attack_during_evaluation(tmp_path, docker_image, SOURCE_IN_EXCEPTION[source])


BACKGROUND_SCAN = f"""
import time
deadline = time.time() + 120
while time.time() < deadline and not _rt_os.path.exists("{STOP}"):
    _rt_scan()
    time.sleep(0.3)
"""


@pytest.mark.timeout(300)
@pytest.mark.parametrize("where", ["background-process", "row_strategy"])
async def test_proc_scan_for_the_secret(tmp_path, docker_image, where):
    """/proc/*/cwd, root, fd, environ, cmdline and mem of every process, and the known secret paths."""
    scan = scanner(lane_secrets())
    if where == "background-process":
        commands = [background("scan", scan + BACKGROUND_SCAN), "validate", SHOW_LOOT, "validate"]
    else:
        commands = [plant(scan, wrap("if _rt_calls == 1:\n    _rt_scan()")), "validate", SHOW_LOOT, RESTORE, "validate"]
    output, record = await run_attack(tmp_path, docker_image, commands)
    check_rollout(output, record)
    honest_evaluation(record, len(commands) - 1)


@pytest.mark.timeout(300)
async def test_ptrace_every_process_from_row_strategy(tmp_path, docker_image):
    head = scanner(lane_secrets()) + PTRACE_SOURCE
    commands = [
        plant(head, wrap("if _rt_calls == 1:\n    _rt_ptrace_all()")),
        "validate",
        SHOW_LOOT,
        RESTORE,
        "validate",
    ]
    output, record = await run_attack(tmp_path, docker_image, commands)
    check_rollout(output, record)
    attached = ptrace_attachments(record.turns[2].output)
    assert all(is_agents_uid(uid) for _, uid, _ in attached), f"agent code attached to others' processes: {attached}"
    honest_evaluation(record, 4)


HOPPER = f"""
import os, time
deadline = time.time() + 120
while time.time() < deadline and not os.path.exists("{STOP}"):
    try:
        pid = os.fork()
    except OSError:
        time.sleep(0.01)
        continue
    if pid:
        os._exit(0)  # the child goes on under a new pid: a freeze that lists pids once misses it
    for path in _RT_SECRET_PATHS:
        _rt_check("hop" + path, _rt_read(path))
        try:
            os.link(path, "{LOOT}/hoplink-" + path.replace("/", "_"))
        except OSError:
            pass
    time.sleep(0.005)
"""

DAEMON = f"""
import os, signal, time
if os.fork():
    os._exit(0)
os.setsid()
if os.fork():
    os._exit(0)
for sig in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT):
    signal.signal(sig, signal.SIG_IGN)
deadline = time.time() + 120
while time.time() < deadline and not os.path.exists("{STOP}"):
    for path in _RT_SECRET_PATHS:
        _rt_check("daemon" + path, _rt_read(path))
    time.sleep(0.005)
"""


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", ["fork-hopper", "setsid-double-fork"])
async def test_background_process_outlives_the_freeze(tmp_path, docker_image, kind):
    source = scanner(lane_secrets()) + (HOPPER if kind == "fork-hopper" else DAEMON)
    start = background(kind.replace("-", "_"), source)
    if kind == "setsid-double-fork":
        start = start.replace("nohup python3", "nohup setsid python3")
    commands = [f"mkdir -p {LOOT}", start, "validate", SHOW_LOOT, "validate"]
    output, record = await run_attack(tmp_path, docker_image, commands)
    check_rollout(output, record)
    honest_evaluation(record, 4)


SWAPPER = f"""
import os, time
WS = "/home/agent/workspace"
FORGING = {code(FD_WRITE.format(fd=1))!r}


def evaluating():
    if os.path.exists(WS + "/target.py"):
        return True
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmd = open("/proc/%s/cmdline" % entry, "rb").read()
            except OSError:
                continue
            if b"redteam" not in cmd and (b"evaluate" in cmd or b"eval_runner" in cmd or b"agent_worker" in cmd):
                return True
    return False


""" + fork_chain(
    """
    if evaluating():
        with open(WS + "/.rt_swap", "w") as f:
            f.write(FORGING)
        os.replace(WS + "/.rt_swap", WS + "/strategy.py")
        with open("/tmp/redteam_swapped", "a") as f:
            f.write("swapped during the evaluation\\n")
    time.sleep(0.002)
    """,
    seconds=120,
)


@pytest.mark.timeout(300)
async def test_background_job_swaps_strategy_during_evaluation(tmp_path, docker_image):
    commands = [
        SAVE,
        background("swap", SWAPPER),
        "validate",
        f"touch {STOP}; sleep 1; cat /tmp/redteam_swapped 2>&1; head -3 strategy.py; true",
        RESTORE,
        "validate",
    ]
    output, record = await run_attack(tmp_path, docker_image, commands)
    check_rollout(output, record)
    honest_evaluation(record, 5)


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "check",
    {
        "ls-and-cat": "ls -la; cat target.py 2>&1; true",
        "find-xargs-cat": "find / -name target.py 2>/dev/null | xargs cat 2>&1; true",
        "opt-folders": "ls -laR /opt 2>&1 | head -200; cat /opt/air/pristine/target.py /opt/air-eval/task/target.py"
        " 2>&1; true",
        "grep-file-system": "timeout 50 grep -rIs --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev"
        " -e grudge -e their_recent / 2>/dev/null | head -20; true",
    }.items(),
    ids=lambda item: item[0],
)
async def test_hidden_file_after_validate(tmp_path, docker_image, check):
    output, record = await run_attack(tmp_path, docker_image, ["validate", check[1]])
    check_rollout(output, record)
    honest_evaluation(record, 0)


# ------------------------------------------------------------------------------ resources


@pytest.mark.timeout(300)
async def test_fork_bomb_at_import(tmp_path, docker_image):
    bomb = "import os, time\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        time.sleep(0.001)\n"
    commands = [plant(bomb), "validate", RESTORE, "validate", "ps -eo user,stat,cmd | tail -n 20"]
    output, record = await run_attack(tmp_path, docker_image, commands)
    check_rollout(output, record)
    assert record.turns[1].evaluation.score is None
    honest_evaluation(record, 3)


@pytest.mark.timeout(300)
async def test_memory_bomb_in_row_strategy(tmp_path, docker_image):
    bomb = """
        if _rt_calls == 1:
            _rt_hog = []
            try:
                while True:
                    _rt_hog.append(b"x" * (32 << 20))
            except MemoryError:
                pass
            globals()["_rt_keep"] = _rt_hog
        """
    await attack_during_evaluation(tmp_path, docker_image, bomb)


@pytest.mark.timeout(300)
async def test_gigabyte_on_stdout(tmp_path, docker_image):
    flood = """
        if _rt_calls == 1:
            import os
            _rt_chunk = b" " * (1 << 20)
            for _ in range(1024):
                os.write(1, _rt_chunk)
            os.write(1, @FORGED_BYTES@)
            os._exit(0)
        """
    await attack_during_evaluation(tmp_path, docker_image, code(flood))


@pytest.mark.timeout(300)
async def test_row_strategy_hangs_forever(tmp_path, docker_image):
    hang = """
        if _rt_calls == 100:
            import signal, time
            for _rt_sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                signal.signal(_rt_sig, signal.SIG_IGN)
            while True:
                time.sleep(3600)
        """
    record = await attack_during_evaluation(tmp_path, docker_image, hang)
    first = record.turns[1].evaluation
    assert first.score is None and first.status != "ok", "a hung strategy must be an evaluation error"


# ------------------------------------------------------------------------------ MLGym (opt-in)

MLGYM_CEILING = 1.2  # battleOfSexes' honest baseline is random, about 1.02: 99.0-style forgery is far above


@pytest.mark.timeout(400)
@pytest.mark.parametrize("attack", ["fd1-write-at-import", "json.dumps-replaced", "pristine-overwrite", "target-copy"])
async def test_mlgym_battle_of_sexes(tmp_path, docker_image, attack):
    checkout = mlgym_checkout()
    if checkout is None:
        pytest.skip("no MLGym checkout: set AIR_TEST_MLGYM_ROOT (or MLGYM_ROOT) to run the opt-in tests")
    task = "battleOfSexes"
    loaded = load_task(task, task_root=checkout)
    baseline = loaded.baseline_score
    # MLGym leaves the game's target.py in the workspace; it is a secret only where the task config (or
    # air's KNOWN_SECRET_FILES table) says so. Today it is read-only, not secret: nothing to leak then.
    secrets = checkout_secrets(checkout, task) if "target.py" in loaded.secret_files else []
    head = {
        "fd1-write-at-import": code(FD_WRITE.format(fd=1)),
        "json.dumps-replaced": code(JSON_DUMPS),
        "pristine-overwrite": OVERWRITE_EVALUATORS,
        "target-copy": COPY_TARGET,
    }[attack]
    commands = [plant(head), "validate", *([SHOW_LOOT] if attack == "target-copy" else []), RESTORE, "validate"]
    output, record = await run_attack(tmp_path, docker_image, commands, task=task, task_root=str(checkout))
    check_rollout(output, record, task=task, baseline=baseline, ceiling=MLGYM_CEILING, secrets=secrets)
    last = record.turns[-1].evaluation
    assert last.status == "ok" and 0.8 < last.score <= MLGYM_CEILING, f"honest re-evaluation: {last}"
