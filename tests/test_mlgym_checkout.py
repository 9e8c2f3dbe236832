"""Against a real MLGym checkout, when one is given (MLGYM_ROOT or AIR_TEST_MLGYM_ROOT); skipped otherwise.

MLGym is CC-BY-NC: nothing of it is in this repository. Point MLGYM_ROOT at a user's checkout to
check the runtime against it unchanged: every task config loads (or fails with its file named),
and the game tasks and titanic evaluate with MLGym's own evaluation scripts in our sandbox.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from air.sandbox.container import Sandbox
from air.tasks.config import TaskError
from air.tasks.loader import list_tasks, load_task
from air.tasks.workspace import TaskWorkspace
from rigs.patience import backstop
from tests.opt_in import mlgym_checkout

CHECKOUT = mlgym_checkout()
ROOT = str(CHECKOUT or "")  # passed explicitly: conftest removes $MLGYM_ROOT from every test's environment
pytestmark = pytest.mark.skipif(CHECKOUT is None, reason="no MLGym checkout (set MLGYM_ROOT)")


def test_every_task_config_loads_or_names_its_file() -> None:
    loaded = 0
    for name in list_tasks(ROOT):
        try:
            load_task(name, ROOT)
            loaded += 1
        except TaskError as exc:
            assert f"{name}.yaml" in str(exc)
    assert loaded >= 10


@pytest.mark.docker
@pytest.mark.parametrize("name", ["battleOfSexes", "prisonersDilemma", "blotto"])
async def test_game_starter_scores_near_its_baseline(name: str, sandbox: Sandbox) -> None:
    task = load_task(name, ROOT)
    workspace = TaskWorkspace(task, sandbox)
    await workspace.setup()
    evaluation = await workspace.evaluate()
    assert evaluation.ok, evaluation.error
    assert evaluation.score == pytest.approx(task.baseline_score, abs=0.05)  # MLGym's games are noisy


@pytest.mark.docker
@pytest.mark.parametrize("name", ["battleOfSexes", "prisonersDilemma", "blotto"])
async def test_a_games_opponent_draws_from_the_hidden_seed(name: str, sandbox: Sandbox) -> None:
    """MLGym's games seed nothing and hold no seed of their own (so nothing public predicts the opponent):
    the opponent draws from the global `random`, which eval_bootstrap seeds from the hidden evaluation seed."""
    data = CHECKOUT / "data" / name
    sources = (data / "evaluate.py").read_text() + (data / "target.py").read_text()
    assert "seed" not in sources and "Random(" not in sources
    task = load_task(name, ROOT)
    scores = []
    for seed in (7, 7, 8):
        workspace = TaskWorkspace(task, sandbox, seed=seed)
        await workspace.setup()
        evaluation = await workspace.evaluate()
        assert evaluation.ok, evaluation.error
        scores.append(evaluation.score)
    assert scores[0] == scores[1] and scores[0] != scores[2], scores


@pytest.mark.docker
async def test_titanic_answers_hidden_and_evaluated(sandbox: Sandbox) -> None:
    task = load_task("titanic", ROOT)
    workspace = TaskWorkspace(task, sandbox)
    await workspace.setup()
    assert (await sandbox.run("ls data/ground_truth.csv")).exit_code != 0
    await sandbox.run(
        "python -c \"import pandas as p; t = p.read_csv('data/test.csv'); t['Survived'] = 0; "
        "t[['PassengerId', 'Survived']].to_csv('submission.csv', index=False)\""
    )
    evaluation = await workspace.evaluate()
    assert evaluation.ok and 0.5 < evaluation.score < 0.8  # "nobody survives" on MLGym's test split
    # MLGym's evaluator merges on PassengerId: a repeated id would count twice. Refused before it runs.
    await sandbox.run(
        "python -c \"import pandas as p; s = p.read_csv('submission.csv'); "
        "s.loc[1, 'PassengerId'] = s.loc[0, 'PassengerId']; s.to_csv('submission.csv', index=False)\""
    )
    repeated = await workspace.evaluate()
    assert repeated.score is None and "gives PassengerId" in repeated.error, repeated


@pytest.mark.docker
@pytest.mark.timeout(300)
async def test_a_rollout_with_mlgyms_own_commands(tmp_path: Path, docker_image: str) -> None:
    """MLGym's commands installed from the checkout: open, a guarded multi-line edit, validate, submit."""
    from air.policies.scripted import ScriptPolicy
    from tests.rollouts import make_env, run_group, trajectories

    env = make_env(tmp_path, docker_image, task_root=ROOT, task_configs=["battleOfSexes"], max_turns=6)
    system = env.get_dataset()[0]["prompt"][0]["content"]
    assert "end_of_edit" in system and "search_dir" in system
    edit = "edit 1:1\nNOTE = 'written through MLGym edit'\nend_of_edit"
    commands = ['open "strategy.py"', "create notes.py", edit, "cat notes.py", "validate"]
    (output,) = await run_group(env, ScriptPolicy(commands), "battleOfSexes")
    assert output.get("error") is None
    (record,) = trajectories(tmp_path)
    assert "[File: /home/agent/workspace/strategy.py" in record.turns[0].output
    assert "File updated" in record.turns[2].output
    assert "NOTE = 'written through MLGym edit'" in record.turns[3].output
    baseline = load_task("battleOfSexes", ROOT).baseline_score
    assert record.turns[4].evaluation.score == pytest.approx(baseline, abs=0.05)


def test_the_viewer_reads_every_published_mlgym_run() -> None:
    """MLGym's 676 published runs (13 models x 13 tasks x 4 seeds): every one indexed, none unreadable,
    each with its model, task and (when it has turns) the commands of its .traj."""
    from air.viewer.index import TrajectoryIndex
    from air.viewer.stats import improvement_by_task, index_frame

    folder = Path(ROOT) / "trajectories"
    if not folder.is_dir():
        pytest.skip(f"{folder}: this checkout has no published trajectories")
    expected = {p.parent for p in folder.rglob("*") if p.name == "results.json" or p.suffix == ".traj"}
    index = TrajectoryIndex(folder).refresh()
    assert index.problems == []
    assert len(index.rollouts) == len(expected) > 0
    frame = index_frame(index)
    assert frame["agent"].str.len().gt(0).all() and frame["task"].str.len().gt(0).all()
    assert (improvement_by_task(frame)["rollouts"].sum()) == frame["improvement"].notna().sum()
    some = next(r for r in index.rollouts if r.turns > 0)
    assert index.load(some.key).turns[0].model_text


@pytest.mark.docker
@pytest.mark.timeout(600)
def test_the_seed_command_on_battle_of_sexes_with_mlgym_config_root(tmp_path: Path, docker_image: str) -> None:
    """The original guide's run: MLGYM_CONFIG_ROOT=<MLGym>/configs, the model at --base-url."""
    import json
    import subprocess
    import sys

    from air.serving.server import PolicyServer

    out = tmp_path / "run"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "MLGYM_CONFIG_ROOT": str(Path(ROOT) / "configs")}
    with PolicyServer("baseline", model_name="served-by-hand") as server:
        result = subprocess.run(
            [sys.executable, "-m", "air.prime_orchestrator", "--task", "battleOfSexes", "--model", "served-by-hand"]
            + ["--base-url", server.base_url, "--num-steps", "1", "--batch-size", "2"]
            + ["--rollouts-per-example", "2", "--output-dir", str(out)],
            capture_output=True,
            text=True,
            env=env,
            timeout=backstop(540),
        )
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rollouts"] == 2 and summary["masked"] == 0


@pytest.mark.docker
@pytest.mark.timeout(600)
async def test_demo_on_the_games_titanic_and_the_broken_configs(docker_image: str) -> None:
    """`air demo`: the sampled games reproduce within their spread, titanic ships no baseline, the
    house-price split is data missing with the command that makes it, and a broken config is a row."""
    import io

    from rich.console import Console

    from air.runs.demo import run_demo
    from air.sandbox.config import SandboxConfig

    names = ["battleOfSexes", "prisonersDilemma", "blotto", "titanic", "regressionHousePrice"]
    names += ["regressionKaggleHousePrice"]
    console = Console(file=io.StringIO(), width=120)
    results = await run_demo(names, ROOT, SandboxConfig(image=docker_image, run_id="pytest"), console)
    statuses = {r.name: r.status for r in results}
    generated = (Path(ROOT) / "data" / "regressionKaggleHousePrice" / "data").is_dir()
    assert statuses == {
        "battleOfSexes": "reproduced",
        "prisonersDilemma": "reproduced",
        "blotto": "reproduced",
        "titanic": "no baseline shipped",
        "regressionHousePrice": "failed",
        "regressionKaggleHousePrice": "reproduced" if generated else "data missing",
    }, statuses
    details = {r.name: r.detail for r in results}
    if not generated:
        assert "--with 'pandas<3'" in details["regressionKaggleHousePrice"]
    assert "datasets/housePrice.yaml" in details["regressionHousePrice"]


@pytest.mark.timeout(300)
def test_the_house_price_split_command_works(tmp_path: Path) -> None:
    """The command the loader, `air check` and `air demo` give, run on a copy of MLGym's generator
    (never in the checkout): it needs uv and PyPI or uv's cache (pandas < 3)."""
    import shutil
    import subprocess

    from air.tasks.loader import generator_command

    if shutil.which("uv") is None:
        pytest.skip("uv is not on PATH")
    task = tmp_path / "regressionKaggleHousePrice"
    shutil.copytree(Path(ROOT) / "data" / "regressionKaggleHousePrice" / "_helpers", task / "_helpers")
    command = generator_command(task / "data")
    assert command is not None and "pandas<3" in command
    result = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=backstop(280))
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(p.name for p in (task / "data").iterdir()) == [
        "answer.csv",
        "test.csv",
        "train.csv",
        "validation.csv",
    ]


@pytest.mark.docker
async def test_blotto_refuses_an_allocation_of_the_wrong_length(sandbox: Sandbox) -> None:
    workspace = TaskWorkspace(load_task("blotto", ROOT), sandbox)
    await workspace.setup()
    honest = await workspace.evaluate()
    assert honest.ok, honest
    await sandbox.write_file(
        "/home/agent/workspace/strategy.py", "def row_strategy(history):\n    return [120]\n", owner="agent"
    )
    short = await workspace.evaluate()
    assert short.score is None and "returned 1 values; the task expects 6" in short.error, short
