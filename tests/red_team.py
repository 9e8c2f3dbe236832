"""Helpers for the red-team tests (tests/tasks/test_red_team.py): rollouts through the env's real path
with a scripted agent, the shell snippets that plant and run an attack, and the checks every attack must
pass. The attacking Python itself is in tests/red_team_attacks.py.

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

from air.policies.scripted import ScriptPolicy
from air.sandbox.agent_uid import UID_BASE
from air.tasks.workspace import evaluation_seed
from rigs.patience import backstop
from tests import rollouts

TOL = 1e-6
# The env's evaluation_seed in red-team rollouts: the k-th evaluation of a rollout draws from
# evaluation_seed(RED_TEAM_SEED, k), so the honest scores are computed once per session.
RED_TEAM_SEED = 20_200_611
LANE_DATA = Path(__file__).resolve().parents[1] / "air/tasks/builtin/data/laneMerge"
FORGED = '{"Score": 99.0}'
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
            [sys.executable, "evaluate.py"], cwd=folder, env=env, capture_output=True, text=True, timeout=backstop(120)
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
    ran = [t.command for t in record.turns]
    last = record.turns[-1].output[-1500:] if record.turns else ""
    why = f"{record.exit_status}: {record.error}; {record.error_chain}"
    assert ran == commands, f"{len(ran)} of {len(commands)} steps of the attack ran ({why}); the last said {last!r}"
    return output, record


def past_the_memory_budget(monkeypatch, **sizes: str) -> None:
    """The env's containers get ``sizes`` (SandboxConfig fields: memory, tmp_size, shm_size) without the memory
    budget's refusal (``model_construct``): a setting refused at load, played as if it had passed."""
    from air.env.settings import MLGymEnvSettings
    from air.sandbox.config import SandboxConfig

    real = MLGymEnvSettings.sandbox_config

    def oversized(self):
        return SandboxConfig.model_construct(**{**real(self).model_dump(), **sizes})

    monkeypatch.setattr(MLGymEnvSettings, "sandbox_config", oversized)


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


def is_agents_uid(uid: int) -> bool:
    """Whether ``uid`` is a rollout's agent: each container's agent has a uid of its own, above ``UID_BASE``."""
    return uid >= UID_BASE


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
