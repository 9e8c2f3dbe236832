"""The process boundary between the evaluator and the agent's code, on this machine (no Docker): the real
worker script in a child process, the real proxy module and shared-memory channel in this one. The Docker
tests (test_red_team.py, test_task_runtime.py) drive the same code as root/air-eval/agent in a container."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "air" / "tasks" / "scripts"
sys.path.insert(0, str(SCRIPTS))

import air_agent_proxy  # noqa: E402
import call_channel  # noqa: E402
from call_channel import NotPlainData, from_plain, to_plain  # noqa: E402


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        0,
        -3,
        2**70,
        1.5,
        float("inf"),
        "s",
        [],
        [1, (2, 3)],
        (1, [2, (3,)]),
        {"a": 1, 2: (3, 4)},
        {(1, 2): None},
    ],
)
def test_plain_values_cross_unchanged(value):
    back = from_plain(json.loads(json.dumps(to_plain(value))))
    assert back == value and type(back) is type(value)


def test_numpy_values_become_python_numbers():
    np = pytest.importorskip("numpy")
    assert from_plain(json.loads(json.dumps(to_plain(np.int64(1))))) == 1
    assert from_plain(json.loads(json.dumps(to_plain(np.array([[1, 2]]))))) == [[1, 2]]


@pytest.mark.parametrize("value", [object(), type("Liar", (int,), {"__eq__": lambda s, o: True})(7), {1, 2}, b"x"])
def test_objects_that_could_lie_do_not_cross(value):
    with pytest.raises(NotPlainData):
        to_plain(value)


@pytest.mark.parametrize(
    "raw", [{"__air_tuple__": 1}, {"a": 1, "b": 2}, {"__air_dict__": [[["unhashable"], 1]]}, {"__air_dict__": [[1]]}]
)
def test_malformed_replies_are_refused(raw):
    with pytest.raises(NotPlainData):
        from_plain(raw)


# ------------------------------------------------------------------------------ two real processes


@pytest.fixture
def agent(tmp_path, monkeypatch):
    """Starts the worker over a workspace holding ``strategy.py`` (the text given), returns the proxy module."""
    workers = []

    def start(source: str, timeout_s: float = 30.0):
        workspace = tmp_path / "ws"
        workspace.mkdir(exist_ok=True)
        (workspace / "strategy.py").write_text(textwrap.dedent(source))
        region = os.memfd_create("air-test")
        os.ftruncate(region, call_channel.REGION_SIZE)
        mine, theirs = socket.socketpair()
        worker = subprocess.Popen(
            [sys.executable, "-B", str(SCRIPTS / "agent_worker.py"), str(region), str(theirs.fileno()), str(workspace)],
            pass_fds=(region, theirs.fileno()),
            cwd=workspace,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        theirs.close()
        workers.append(worker)
        monkeypatch.setenv("AIR_AGENT_CHANNEL", f"{region},{mine.detach()}")
        monkeypatch.setattr(air_agent_proxy, "_connection", None)
        monkeypatch.setattr(air_agent_proxy, "CALL_TIMEOUT_S", timeout_s)
        proxy_dir = tmp_path / "private"
        proxy_dir.mkdir(exist_ok=True)
        (proxy_dir / "strategy.py").write_text(air_agent_proxy.PROXY_SOURCE)
        namespace = {"__file__": str(proxy_dir / "strategy.py"), "__name__": "strategy"}
        exec(compile(air_agent_proxy.PROXY_SOURCE, namespace["__file__"], "exec"), namespace)
        return namespace

    yield start
    for worker in workers:
        worker.kill()
        worker.wait()


def test_calls_cross_with_tuples_and_results(agent):
    strategy = agent(
        """
        LIMIT = (1, 2)
        def row_strategy(history):
            return history[-1][1] if history and isinstance(history[-1], tuple) else 0
        def both(history, extra=None):
            return (len(history), extra)
        """
    )
    assert strategy["LIMIT"] == (1, 2)
    assert strategy["row_strategy"]([]) == 0
    assert strategy["row_strategy"]([(0, 1)]) == 1  # tuples arrive as tuples
    for n in range(200):  # the fast path (known function id) after the first call
        assert strategy["row_strategy"]([(0, n % 2)]) == n % 2
    assert strategy["both"]([1, 2], extra={"k": [1]}) == (2, {"k": [1]})


def test_seeds_the_evaluator_sets_reach_the_agents_generators(agent):
    import random

    strategy = agent(
        """
        import random
        def draw(history):
            return random.random()
        """
    )
    random.seed(7)
    first = strategy["draw"]([])
    random.seed(7)
    assert strategy["draw"]([]) == first == random.Random(7).random()


@pytest.mark.parametrize("where", ["at import", "inside the call"])
def test_numpy_seeds_reach_the_agents_numpy_whenever_it_imports_it(agent, where):
    # The worker seeds numpy when the agent's code imports it (not before: importing it costs ~0.16 s of CPU
    # per evaluation), so an import inside the strategy draws what it would draw in MLGym's evaluator.
    np = pytest.importorskip("numpy")
    early = "import numpy" if where == "at import" else ""
    late = "import numpy" if where == "inside the call" else ""
    strategy = agent(
        f"""
        {early}
        def draw(history):
            {late}
            return [float(numpy.random.random()), "numpy" in __import__("sys").modules]
        """
    )
    np.random.seed(11)
    first, imported = strategy["draw"]([])
    np.random.seed(11)
    assert strategy["draw"]([])[0] == first == np.random.RandomState(11).random_sample()
    assert imported
    np.random.seed(12)
    assert strategy["draw"]([])[0] == np.random.RandomState(12).random_sample()


@pytest.mark.parametrize(
    "body, expected",
    [
        ("raise ValueError('nope')", "ValueError: nope"),
        ("raise SystemExit('{\"Score\": 99}')", "SystemExit"),
        ("return object()", "cannot take"),
        ("return type('L', (int,), {'__eq__': lambda s, o: True})(1)", "cannot take"),
    ],
)
def test_the_agents_failures_are_errors_here(agent, body, expected):
    strategy = agent(f"def row_strategy(history):\n    {body}\n")
    with pytest.raises(air_agent_proxy.AgentCodeError, match=expected):
        strategy["row_strategy"]([])


def test_a_hang_is_a_time_limit_error_and_the_channel_stays_closed(agent):
    strategy = agent("def row_strategy(history):\n    while True:\n        pass\n", timeout_s=1.0)
    with pytest.raises(air_agent_proxy.AgentCodeError, match="did not return within 1 s"):
        strategy["row_strategy"]([])
    with pytest.raises(air_agent_proxy.AgentCodeError, match="did not return"):
        strategy["row_strategy"]([])


def test_a_worker_that_dies_is_an_error_not_a_hang(agent):
    strategy = agent("import os\ndef row_strategy(history):\n    os._exit(0)\n", timeout_s=20.0)
    with pytest.raises(air_agent_proxy.AgentCodeError, match="died|closed"):
        strategy["row_strategy"]([])


def test_an_import_that_prints_or_exits_fails_the_import_only(agent):
    with pytest.raises(ImportError, match="SystemExit"):
        agent("import sys\nprint('{\"Score\": 99.0}')\nsys.exit(0)\n")
