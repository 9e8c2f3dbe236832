"""Tasks laid out and evaluated in real containers: baselines reproduce, secrets stay hidden, and
nothing the agent does in its workspace changes what evaluation runs or reads."""

from __future__ import annotations

import pytest

from air.sandbox.container import Sandbox
from air.tasks.loader import Task, list_tasks, load_task
from air.tasks.workspace import REJECTED, TaskWorkspace
from tests.mlgym_like import MODEL_IMPORTS_TASK, WRONG_LENGTH_TASK, write_mlgym_like_root, write_own_task

pytestmark = pytest.mark.docker


def _own_task(tmp_path, name: str, entrypoint: str, files: dict[str, str], config: str) -> Task:
    """A task of ``entrypoint`` in an MLGym-like root (tests/mlgym_like.write_own_task)."""
    return load_task(name, write_own_task(tmp_path / "MLGym", name, entrypoint, files, config))


async def _workspace(task: Task, sandbox: Sandbox) -> TaskWorkspace:
    workspace = TaskWorkspace(task, sandbox)
    await workspace.setup()
    return workspace


@pytest.mark.parametrize("name", list_tasks())
async def test_builtin_baseline_reproduces_its_recorded_score(name: str, sandbox: Sandbox) -> None:
    task = load_task(name)
    workspace = await _workspace(task, sandbox)
    for script in task.config.baseline_paths:
        result = await sandbox.run(f"python {script}", timeout=120)
        assert result.exit_code == 0, result.output
    evaluation = await workspace.evaluate()
    assert evaluation.ok, evaluation.error
    for metric, value in task.baseline.items():
        assert evaluation.metrics[metric] == pytest.approx(value, abs=1e-4)
    assert evaluation.score == pytest.approx(task.baseline_score, abs=1e-4)


async def test_secrets_are_absent_during_the_episode(sandbox: Sandbox) -> None:
    task = load_task("loanDefault")
    await _workspace(task, sandbox)
    listing = await sandbox.run("ls data; cat data/answer.csv; ls /opt/air; find / -name answer.csv 2>/dev/null")
    assert "answer.csv" not in listing.output.replace("cat: data/answer.csv", "")
    assert "Permission denied" in listing.output
    owners = await sandbox.run("stat -c '%U %n' . evaluate.py data data/train.csv baseline.py")
    assert owners.output.split("\n")[:5] == [
        "agent .",
        "root evaluate.py",
        "root data",
        "root data/train.csv",
        "agent baseline.py",
    ]
    assert (await sandbox.run("echo x >> data/train.csv")).exit_code != 0


async def test_the_pristine_copy_is_private_all_the_way_down(sandbox: Sandbox) -> None:
    workspace = await _workspace(load_task("loanDefault"), sandbox)
    await workspace.evaluate()
    code, out = await sandbox.exec_root(["find", "/opt/air", "-perm", "/077"])
    assert code == 0 and out == "", f"readable or writable beyond root: {out}"
    code, out = await sandbox.exec_root(["find", "/opt/air/pristine", "-type", "f", "-name", "answer.csv"])
    assert out.strip() == "/opt/air/pristine/data/answer.csv"


async def test_tampered_or_deleted_evaluation_scripts_are_not_what_runs(sandbox: Sandbox) -> None:
    task = load_task("loanDefault")
    workspace = await _workspace(task, sandbox)
    await sandbox.run("python baseline.py")
    fake = "import json; print(json.dumps({'accuracy': 1.0}))"
    assert (await sandbox.run(f'echo "{fake}" > evaluate.py')).exit_code != 0  # read-only
    assert (await sandbox.run(f'mv evaluate.py old.py && echo "{fake}" > evaluate.py')).exit_code == 0
    assert (await workspace.evaluate()).score == pytest.approx(task.baseline_score, abs=1e-4)
    await sandbox.run("rm -f evaluate.py")
    assert (await workspace.evaluate()).score == pytest.approx(task.baseline_score, abs=1e-4)
    assert (await sandbox.run("ls data/answer.csv")).exit_code != 0  # present only while evaluating


async def test_symlinked_answers_and_swapped_data_do_not_score(sandbox: Sandbox) -> None:
    task = load_task("loanDefault")
    workspace = await _workspace(task, sandbox)
    # The answer file is absent now, but a link to it would resolve during evaluation.
    await sandbox.run("ln -s data/answer.csv submission.csv")
    linked = await workspace.evaluate()
    assert not linked.ok and linked.status == "submission_not_found" and "symbolic link" in linked.error
    # Replace data/ by the agent's own folder holding an answer file that agrees with a fake submission.
    forge = (
        "import pandas as p; t = p.read_csv('data/test.csv'); f = t.assign(defaulted=1)[['id', 'defaulted']]; "
        "f.to_csv('data/answer.csv', index=False); f.to_csv('submission.csv', index=False)"
    )
    await sandbox.run(
        f'rm submission.csv && mv data data.orig && mkdir data && cp data.orig/*.csv data/ && python -c "{forge}"'
    )
    swapped = await workspace.evaluate()
    assert swapped.ok and swapped.score < 0.9  # scored against the real answers, not the agent's
    assert (await sandbox.run("ls data.orig/train.csv")).exit_code == 0  # the agent's files are kept
    await sandbox.run("rm -rf data && ln -s /tmp data")
    relinked = await workspace.evaluate()
    assert relinked.ok and relinked.score == pytest.approx(swapped.score)


async def test_planted_modules_cannot_replace_what_evaluation_imports(sandbox: Sandbox) -> None:
    task = load_task("loanDefault")
    workspace = await _workspace(task, sandbox)
    await sandbox.run("python baseline.py")
    planted = "import sys\nsys.stdout.write(chr(123) + '\"accuracy\": 1.0' + chr(125))\nsys.exit(0)\n"
    await sandbox.write_file("/home/agent/workspace/json.py", planted, owner="agent")
    await sandbox.run("mkdir -p pandas && cp json.py pandas/__init__.py")
    assert (await workspace.evaluate()).score == pytest.approx(task.baseline_score, abs=1e-4)


async def test_background_jobs_cannot_read_secrets_during_evaluation(sandbox: Sandbox) -> None:
    task = load_task("loanDefault")
    workspace = await _workspace(task, sandbox)
    await sandbox.run("python baseline.py")
    await sandbox.run("(while true; do cat data/answer.csv >> /tmp/leak 2>/dev/null; done) >/dev/null 2>&1 &")
    for _ in range(3):
        assert (await workspace.evaluate()).ok
    assert (await sandbox.run("wc -c < /tmp/leak")).output.strip() == "0"
    assert (await sandbox.run("echo alive")).output == "alive\n"  # the shell was resumed


async def test_game_strategy_is_imported_from_the_workspace(sandbox: Sandbox) -> None:
    task = load_task("laneMerge")
    workspace = await _workspace(task, sandbox)
    assert (await sandbox.run("ls target.py")).exit_code != 0  # the opponent is secret
    baseline = await workspace.evaluate()
    await sandbox.run("printf 'def row_strategy(history):\\n    return 0\\n' > strategy.py")
    always_yield = await workspace.evaluate()
    assert baseline.ok and always_yield.ok and always_yield.score != baseline.score


async def test_missing_submission_is_a_clear_message(sandbox: Sandbox) -> None:
    workspace = await _workspace(load_task("buildingEnergy"), sandbox)
    evaluation = await workspace.evaluate()
    assert evaluation.status == "submission_not_found"
    assert "No submission file found at /home/agent/workspace/submission.csv" in evaluation.error


async def test_mlgym_layout_with_absolute_paths_and_known_leak(sandbox: Sandbox, tmp_path) -> None:
    task = load_task("shipwreck", write_mlgym_like_root(tmp_path / "MLGym"))
    workspace = await _workspace(task, sandbox)
    assert (await sandbox.run("ls data")).output.split() == ["test.csv", "train.csv"]
    await sandbox.run("cd /tmp && python /home/agent/workspace/baseline.py")
    evaluation = await workspace.evaluate()
    assert evaluation.ok and evaluation.metrics == {"accuracy": 0.5} and evaluation.score == 0.5


@pytest.mark.parametrize(
    ("name", "prepare", "status", "message"),
    [
        ("chatty", "touch submission.csv", "evaluation_format_error", "one JSON object"),
        ("modelish", "", "submission_not_found", "*.yaml"),
        ("modelish", "mkdir -p ckpt && echo a: 1 > ckpt/config.yaml", "ok", ""),
        ("slow", "", "evaluation_failed", "ran past its budget of 3 s"),  # the task's training_timeout caps it
        ("crashing", "", "evaluation_failed", "exited with code 3"),  # not mistaken for "no submission"
    ],
)
async def test_evaluation_outcomes(sandbox: Sandbox, tmp_path, name, prepare, status, message) -> None:
    task = load_task(name, write_mlgym_like_root(tmp_path / "MLGym"))
    workspace = await _workspace(task, sandbox)
    if prepare:
        await sandbox.run(prepare)
    evaluation = await workspace.evaluate()
    assert evaluation.status == status and message in (evaluation.error or "")
    if status == "ok":
        assert evaluation.metrics == {"Reward Mean": 7.5} and evaluation.score == 7.5


async def test_agent_code_in_a_model_evaluator_is_contained_and_its_forgery_flagged(sandbox: Sandbox, tmp_path) -> None:
    """MLGym's model evaluators import the agent's code. Here that code runs as air-eval, leaves files
    for the agent in /tmp and in a folder the agent opened to everyone, and reports a score its metric
    cannot reach (the task's own ``score_range``): the score is not counted, nothing stays behind."""
    files = {
        "evaluate.py": "import json\nimport model_code\nprint(json.dumps({'Reward Mean': model_code.score()}))\n",
        "model_code.py": "def score():\n    return 1.0\n",
    }
    config = "baseline_scores: [{Reward Mean: 1.0}]\nscore_range: [0.0, 10.0]\n"
    workspace = await _workspace(_own_task(tmp_path, "modelleak", "ModelSubmissionTasks", files, config), sandbox)
    agent_code = (
        "import os\n"
        "def score():\n"
        "    open('/tmp/left-by-evaluator', 'w').write(os.popen('id -un').read())\n"
        "    try:\n"
        "        open('/home/agent/workspace/drop/left-by-evaluator', 'w').write('x')\n"
        "    except PermissionError:\n"
        "        open('/tmp/drop-refused', 'w').write('x')\n"
        "    return 99.0\n"
    )
    await sandbox.write_file("/home/agent/workspace/model_code.py", agent_code, owner="agent")
    await sandbox.run("mkdir -p drop && chmod 777 drop && mkdir -p ckpt && echo a: 1 > ckpt/config.yaml")
    evaluation = await workspace.evaluate()
    assert evaluation.status == "suspicious" and evaluation.score is None, evaluation
    assert "outside what Reward Mean can reach" in evaluation.detail
    assert evaluation.error == REJECTED and "Reward Mean" not in evaluation.error  # nothing to forge along
    assert evaluation.metrics == {"Reward Mean": 99.0}  # kept in the trajectory for people, not shown to the agent
    result = await sandbox.run("ls /tmp drop; stat -c %A drop")
    assert "left-by-evaluator" not in result.output and "drop-refused" not in result.output
    assert result.output.strip().endswith("drwxrwxr-x")  # others' write taken away before evaluating


async def test_a_model_tasks_data_folder_replaced_by_the_agent_fails_instead_of_being_repaired(
    sandbox: Sandbox, tmp_path
) -> None:
    """A model task's evaluator reads data/ in the workspace: root no longer repairs a data/ that is not the
    task's (it would work in the agent's folder); the evaluation fails until the original is back."""
    files = {
        "evaluate.py": "import json\nprint(json.dumps({'Total': sum(int(v) for v in open('data/values.txt'))}))\n",
        "data/values.txt": "1\n2\n",
    }
    task = _own_task(tmp_path, "modeldata", "ModelSubmissionTasks", files, "baseline_scores: [{Total: 3}]\n")
    workspace = await _workspace(task, sandbox)
    await sandbox.run("echo a: 1 > config.yaml")
    assert (await workspace.evaluate()).score == 3
    await sandbox.run("mv data data.orig && mkdir data && echo 1000 > data/values.txt")
    replaced = await workspace.evaluate()
    assert replaced.score is None and "data/ in the workspace is no longer the task's own folder" in replaced.error
    await sandbox.run("rm -r data && ln -s data.orig data")
    linked = await workspace.evaluate()
    assert linked.score is None and "Put the original back" in linked.error
    await sandbox.run("rm data && mv data.orig data")
    assert (await workspace.evaluate()).score == 3


async def test_a_submission_repeating_ids_is_refused_before_the_evaluator(sandbox: Sandbox) -> None:
    task = load_task("loanDefault")
    assert task.submission_id_column == "id"
    workspace = await _workspace(task, sandbox)
    await sandbox.run(
        "python -c \"import pandas as p; t = p.read_csv('data/test.csv'); "
        "s = t.assign(defaulted=0)[['id', 'defaulted']]; s.loc[1, 'id'] = s.loc[0, 'id']; "
        "s.to_csv('submission.csv', index=False)\""
    )
    evaluation = await workspace.evaluate()
    assert evaluation.score is None and evaluation.status == "evaluation_failed"
    assert "gives id" in evaluation.error and "more than one row" in evaluation.error, evaluation.error


async def test_an_optional_import_of_the_evaluator_never_reaches_a_module_the_agent_added(
    sandbox: Sandbox, tmp_path
) -> None:
    """Only the task's own modules (strategy.py) are proxied into the evaluator: a `speedups.py` the agent
    adds is not importable there, so an evaluator's `try: import speedups` falls back as it should."""
    files = {
        "strategy.py": "def play():\n    return 1.0\n",
        "evaluate.py": "import json\nfrom strategy import play\ntry:\n    import speedups\n    bonus = speedups.BONUS\n"
        "except ImportError:\n    bonus = 0.0\nprint(json.dumps({'Score': play() + bonus}))\n",
    }
    task = _own_task(tmp_path, "optional", "PythonSubmissionTasks", files, "baseline_scores: [{Score: 1.0}]\n")
    workspace = await _workspace(task, sandbox)
    assert (await workspace.evaluate()).score == 1.0
    await sandbox.write_file("/home/agent/workspace/speedups.py", "BONUS = 100.0\n", owner="agent")
    evaluation = await workspace.evaluate()
    assert evaluation.ok and evaluation.score == 1.0, evaluation


async def test_a_model_evaluator_imports_only_the_tasks_own_modules_from_the_workspace(
    sandbox: Sandbox, tmp_path
) -> None:
    """MLGym's RL evaluators import `gymnax`, which an image may lack: a `gymnax/` the agent writes must not
    stand in for it. The task's own package (`src/`) still imports, submodules included."""
    workspace = await _workspace(_own_task(tmp_path, "modelimports", *MODEL_IMPORTS_TASK), sandbox)
    await sandbox.run("echo a: 1 > config.yaml && mkdir gymnax_like && echo 'EXTRA = 40.0' > gymnax_like/__init__.py")
    evaluation = await workspace.evaluate()
    assert evaluation.ok and evaluation.score == 2.0, evaluation


async def test_a_result_of_the_wrong_length_fails_the_evaluation(sandbox: Sandbox, tmp_path) -> None:
    """A game that compares allocations with zip() and never checks their length (MLGym's blotto): one
    battlefield with every soldier on it would win each comparison made. ``return_lengths`` refuses it."""
    workspace = await _workspace(_own_task(tmp_path, "fields", *WRONG_LENGTH_TASK), sandbox)
    assert (await workspace.evaluate()).score == 0.5
    await sandbox.write_file("/home/agent/workspace/strategy.py", "def allocate():\n    return [120]\n", owner="agent")
    evaluation = await workspace.evaluate()
    assert evaluation.score is None and "strategy.allocate returned 1 values; the task expects 6" in evaluation.error
