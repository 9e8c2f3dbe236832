"""The Streamlit viewer through streamlit.testing's AppTest: the real script, run in-process on
real trajectory folders (ours at any depth, MLGym run folders, malformed files)."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest
from markdown_it import MarkdownIt
from streamlit.testing.v1 import AppTest

from air.env.trajectory_reader import load_trajectory
from air.viewer.index import TrajectoryIndex
from air.viewer.plain import JOINER
from rigs.mlgym_runs import write_mlgym_run
from rigs.patience import backstop
from rigs.synthetic_runs import MIXED_ROLLOUTS as ROLLOUTS
from rigs.synthetic_runs import write_mixed_folder

_MD = MarkdownIt("commonmark")
APP = str(Path(__file__).resolve().parents[2] / "air" / "visualize.py")


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    return write_mixed_folder(tmp_path / "runs")


def _app(folder: Path, monkeypatch: pytest.MonkeyPatch, **query: str) -> AppTest:
    monkeypatch.setenv("AIR_TRAJECTORY_DIR", str(folder))
    at = AppTest.from_file(APP, default_timeout=backstop(60))
    for key, value in query.items():
        at.query_params[key] = value
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _metric(at: AppTest, prefix: str) -> str:
    return next(m.value for m in at.metric if m.label.startswith(prefix))


def _shown(at: AppTest) -> int:
    return int(_metric(at, "rollouts shown").replace(",", ""))


def _run(at: AppTest) -> AppTest:
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _plain(markdown: str) -> str:
    """Markdown (labels, captions, alerts) as it shows on screen: rendered by a CommonMark parser, the
    escaping's invisible word joiners left out."""
    return html.unescape(re.sub(r"<[^>]+>", "", _MD.render(markdown))).replace(JOINER, "").strip()


def _texts(at: AppTest) -> str:
    parts = [c.value for c in at.code] + [_plain(m.value) for m in at.markdown] + [_plain(c.value) for c in at.caption]
    parts += [_plain(x.value) for x in [*at.subheader, *at.error, *at.warning, *at.success]]
    return "\n".join(parts)


def _labels(at: AppTest) -> list[str]:
    return [_plain(e.label) for e in at.expander]


def test_loads_both_formats_at_any_depth_and_counts_the_unreadable(folder: Path, monkeypatch) -> None:
    at = _app(folder, monkeypatch)
    assert _shown(at) == ROLLOUTS + 2  # the synthetic run, the nested record, the MLGym run
    assert _metric(at, "rollouts shown") == f"{ROLLOUTS + 2}"
    assert _metric(at, "unreadable files") == "4"
    table = at.dataframe[0].value
    assert len(table) == ROLLOUTS + 2
    assert any(k.startswith("deep/er/still/handmade/") for k in table["key"])
    assert any(k.startswith("mlgym/acme-tiny-7b__mazeRunner__") for k in table["key"])
    assert "mazeRunner" in set(table["task"]) and "handmade" in set(table["task"])


def test_problems_view_names_each_malformed_file_and_its_error(folder: Path, monkeypatch) -> None:
    at = _app(folder, monkeypatch)
    at.radio(key="view").set_value("Problems")
    _run(at)
    problems = at.dataframe[0].value
    by_file = dict(zip(problems["file"], problems["error"], strict=True))
    assert set(by_file) == {
        "broken.json",
        "empty.json",
        "train/missing.json",
        "mlgym/acme-7b__titanic__plain__t-0.00__p-1.00__c-1.00__install-0_run_0",
    }
    assert "invalid JSON" in by_file["broken.json"]
    assert "empty" in by_file["empty.json"]
    assert "missing field" in by_file["train/missing.json"]
    assert "trajectory" in by_file["mlgym/acme-7b__titanic__plain__t-0.00__p-1.00__c-1.00__install-0_run_0"]
    assert "4 files or run folders could not be read" in _texts(at)


def test_filters_by_task_policy_step_exit_status_and_reward(folder: Path, monkeypatch) -> None:
    index = TrajectoryIndex(folder).refresh()
    rows = index.rollouts
    at = _app(folder, monkeypatch)

    at.multiselect(key="filter_tasks").set_value(["titanic"])
    _run(at)
    assert _shown(at) == sum(r.task == "titanic" for r in rows)
    assert set(at.dataframe[0].value["task"]) == {"titanic"}
    at.multiselect(key="filter_tasks").set_value([])

    at.multiselect(key="filter_agents").set_value(["scripted-improver", "acme-tiny-7b"])
    _run(at)
    assert set(at.dataframe[0].value["task"]) == {"handmade", "mazeRunner"}
    at.multiselect(key="filter_agents").set_value([])

    at.slider(key="filter_steps").set_range(1, 1)
    _run(at)
    assert _shown(at) == sum(r.step == 1 for r in rows) > 0

    at.slider(key="filter_steps").set_range(0, 1)
    at.multiselect(key="filter_exit").set_value(["submitted"])
    _run(at)
    assert _shown(at) == sum(r.exit_status == "submitted" for r in rows)
    at.multiselect(key="filter_exit").set_value([])

    rewards = sorted({r.reward for r in rows if r.reward is not None})
    low, high = rewards[0], rewards[-1]
    at.slider(key="filter_reward").set_range(low + (high - low) / 2, high)
    _run(at)
    chosen = at.slider(key="filter_reward").value
    expected = sum(r.reward is not None and chosen[0] <= r.reward <= chosen[1] for r in rows)
    assert 0 < _shown(at) == expected < len(rows)


def test_text_search_covers_commands_and_outputs_only(folder: Path, monkeypatch) -> None:
    at = _app(folder, monkeypatch)
    at.text_input(key="filter_query").input("QUOKKA_DATA")  # only in the hand-made record's output
    _run(at)
    assert _shown(at) == 1
    assert list(at.dataframe[0].value["task"]) == ["handmade"]
    at.text_input(key="filter_query").input("secret plan")  # only in its reasoning: not searched
    _run(at)
    assert _shown(at) == 0
    assert "No rollout matches the filters." in [i.value for i in at.info]
    at.text_input(key="filter_query").input("solver.py")  # an MLGym command
    _run(at)
    assert set(at.dataframe[0].value["task"]) == {"mazeRunner"}


@pytest.mark.parametrize(
    ("sort", "column", "descending"),
    [("reward", "reward", True), ("turns", "turns", True), ("started", "started_at", False)],
)
def test_sorting_orders_the_table(folder: Path, monkeypatch, sort: str, column: str, descending: bool) -> None:
    at = _app(folder, monkeypatch)
    at.selectbox(key="sort_by").set_value(sort)
    _run(at)
    values = at.dataframe[0].value[column].dropna().tolist()
    assert values == sorted(values, reverse=descending)
    at.toggle(key="sort_reverse").set_value(True)
    _run(at)
    values = at.dataframe[0].value[column].dropna().tolist()
    assert values == sorted(values, reverse=not descending)


def test_a_rollout_step_by_step_with_previous_next_and_jump(folder: Path, monkeypatch) -> None:
    at = _app(folder, monkeypatch)
    at.radio(key="view").set_value("Rollout")
    _run(at)
    key = next(r.key for r in TrajectoryIndex(folder).refresh().rollouts if r.task == "handmade")
    assert "handmade · scripted-improver · reward 0.310 · feedface" in at.selectbox(key="rollout").options
    at.selectbox(key="rollout").set_value(key)
    _run(at)
    assert at.selectbox(key="rollout").value == key
    assert any("handmade · scripted-improver" in _plain(s.value) for s in at.subheader)
    text = _texts(at)
    assert "Step 1 of 4: ls -la" in text and "I list the files." in text
    assert "exit code 0 · 0.25 s" in text
    assert [label for label in _labels(at) if label.startswith("Reasoning")] == ["Reasoning (folded)"]
    assert any(c.value == "secret plan: look first" for c in at.code)
    assert "**Step 1 of 4**: ` ls -la `" in [m.value for m in at.markdown]  # the command set apart, in code
    assert all("secret plan" not in c.value for c in at.code if c.language == "markdown")

    next_button = next(b for b in at.button if b.label.startswith("Next step"))
    next_button.click()
    _run(at)
    assert "Format error:\n2 fenced code blocks" in _texts(at)  # what the agent was told, in a code block
    at.number_input(key="turn").set_value(3)
    _run(at)
    assert "exit code 124 · 30.00 s · timed out" in _texts(at)
    next(b for b in at.button if b.label.startswith("Next step")).click()
    _run(at)
    assert "validate: score 0.8100" in _texts(at)
    assert next(b for b in at.button if b.label.startswith("Next step")).disabled
    next(b for b in at.button if b.label.startswith("◀ Previous")).click()
    _run(at)
    assert at.number_input(key="turn").value == 3

    at.toggle(key="show_all_steps").set_value(True)
    _run(at)
    text = _texts(at)
    assert all(f"Step {i} of 4" in text for i in range(1, 5))


def test_an_mlgym_run_opens_with_its_commands_scores_and_exit_status(folder: Path, monkeypatch) -> None:
    key = next(r.key for r in TrajectoryIndex(folder).refresh().rollouts if r.source == "mlgym")
    at = _app(folder, monkeypatch, rollout=key)  # a shared link opens the rollout directly
    assert at.radio(key="view").value == "Rollout"
    record = load_trajectory(folder / key)
    text = _texts(at)
    assert "exit: submitted · source: mlgym" in text
    assert f"Step 1 of {len(record.turns)}: ls" in text
    assert _metric(at, "final") == "30.0000"  # lower-is-better 'steps': the last score
    at.toggle(key="show_all_steps").set_value(True)
    _run(at)
    text = _texts(at)
    assert "python solver.py" in text and "validate: evaluation_format_error" in text


def test_two_rollouts_side_by_side(folder: Path, monkeypatch) -> None:
    at = _app(folder, monkeypatch)
    at.radio(key="view").set_value("Compare")
    _run(at)
    rows = TrajectoryIndex(folder).refresh().rollouts
    left = next(r for r in rows if r.task == "handmade")
    right = next(r for r in rows if r.source == "mlgym")
    at.selectbox(key="compare_left").set_value(left.key)
    at.selectbox(key="compare_right").set_value(right.key)
    _run(at)
    headers = [_plain(s.value) for s in at.subheader]
    assert "handmade · scripted-improver" in headers and "mazeRunner · acme-tiny-7b" in headers
    labels = _labels(at)
    assert "Step 1 of 4: ls -la" in labels and any(label.startswith("Step 1 of 7: ls") for label in labels)


def test_overview_without_training_steps_charts_per_agent(tmp_path: Path, monkeypatch) -> None:
    write_mlgym_run(tmp_path / "only")
    at = _app(tmp_path / "only", monkeypatch)
    assert _metric(at, "training steps") == "none"
    assert any("charts are per model or policy" in c.value for c in at.caption)
    assert any("no rollout here records its group and training step" in c.value for c in at.caption)


def test_a_rollout_deleted_after_indexing_is_reported_not_fatal(folder: Path, monkeypatch) -> None:
    at = _app(folder, monkeypatch)
    at.radio(key="view").set_value("Rollout")
    _run(at)
    record_key = next(r.key for r in TrajectoryIndex(folder).refresh().rollouts if r.task == "handmade")
    (folder / record_key).unlink()
    at.selectbox(key="rollout").set_value(record_key)
    _run(at)
    assert any("cannot be read any more" in e.value for e in at.error)
    next(b for b in at.button if b.label == "Reload").click()
    _run(at)
    assert all("handmade" not in option for option in at.selectbox(key="rollout").options)


def test_a_missing_or_empty_folder_says_so(tmp_path: Path, monkeypatch) -> None:
    at = _app(tmp_path / "nowhere", monkeypatch)
    assert [_plain(e.value) for e in at.error] == [f"{tmp_path / 'nowhere'}: no such folder."]
    (tmp_path / "empty").mkdir()
    at = _app(tmp_path / "empty", monkeypatch)
    assert any("No readable trajectory" in w.value for w in at.warning)


def test_the_folder_comes_from_the_command_line_after_streamlits_double_dash() -> None:
    from air.viewer.app import default_directory

    assert default_directory(["--trajectory_dir", "/data/run"]) == "/data/run"
    assert default_directory(["-x", "tests/", "--trajectory-dir=/r"]) == "/r"


def test_air_view_refuses_a_missing_folder_naming_it(tmp_path: Path, capsys) -> None:
    from air.cli.main import main

    assert main(["view", str(tmp_path / "nope")]) == 1
    assert f"{tmp_path / 'nope'}: no such folder" in capsys.readouterr().err


def test_air_view_with_no_folder_opens_the_last_rl_runs(tmp_path: Path, capsys) -> None:
    """`uv run rl` records its run's folder; `air view` alone takes it (here up to the port it refuses)."""
    import socket

    from air.cli.main import main
    from air.launch.rl_runs import remember_rl_run

    assert main(["view"]) == 1
    assert "no DIR given and no `uv run rl` recorded on this machine" in capsys.readouterr().err
    run = tmp_path / "outputs"
    run.mkdir()
    remember_rl_run(run)
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        assert main(["view", "--port", str(held.getsockname()[1])]) == 1
    out, err = capsys.readouterr()
    assert out.splitlines()[0] == f"the last rl run's folder: {run}" and "in use" in err, (out, err)


def test_air_view_serves_the_folder_on_loopback_with_streamlits_own_options(tmp_path: Path) -> None:
    from air.viewer.launch import APP, streamlit_arguments

    args = streamlit_arguments(tmp_path, "127.0.0.1", 9123, browser=False)
    assert args[:2] == ["run", str(APP)] and APP.name == "visualize.py"
    assert args[args.index("--") :] == ["--", "--trajectory_dir", str(tmp_path)]
    options = dict(zip(args[2 : args.index("--") : 2], args[3 : args.index("--") : 2], strict=True))
    assert options["--server.address"] == "127.0.0.1" and options["--server.port"] == "9123"
    assert options["--server.headless"] == "true" and options["--browser.gatherUsageStats"] == "false"
    assert "--server.port" not in streamlit_arguments(tmp_path, "127.0.0.1", None, browser=True)


def test_warm_up_indexes_the_folder_the_pages_then_share(tmp_path: Path, capsys) -> None:
    from air.viewer.index import shared_index
    from air.viewer.launch import warm_up
    from air.viewer.stats import index_frame

    folder = write_mixed_folder(tmp_path / "runs")
    warm_up(folder)
    assert f"ready: {ROLLOUTS + 2} rollouts and 4 unreadable files" in capsys.readouterr().err
    index = shared_index(folder)
    assert index.refreshed and len(index.rollouts) == ROLLOUTS + 2
    assert index_frame(index) is index_frame(index)  # built once, by the warm-up


def test_air_view_without_streamlit_says_how_to_get_it(tmp_path: Path, monkeypatch, capsys) -> None:
    """prime-rl's venv gets air-agent without the viewer extra: air view must say so, not crash."""
    import importlib.util

    from air.cli.main import main

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "streamlit" else real_find_spec(name, *a)
    )
    assert main(["view", str(tmp_path)]) == 1
    assert "pip install 'air-mlgym[viewer]'" in capsys.readouterr().err
