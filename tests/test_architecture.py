"""The shape ARCHITECTURE.md promises, checked on the source: layers as folders, small modules, an
import graph without cycles, each folder importing only the layers below it, and verifiers only where
the env meets it."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from rigs.patience import backstop

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "air"
TOP_LEVEL = ("air_mlgym", "simple_env")  # the env ids prime-rl and vf-eval import as modules
# The modules at air/'s top, outside the folders, each with why it is there (ARCHITECTURE.md says the same).
TOP_OF_AIR = {
    "__init__": "the package",
    "prime_orchestrator": "the original project's command, kept for its users: `air standalone`",
    "run_training": "the seed's spelling of `air`, kept for its users (and to run `air` under sys.executable)",
    "visualize": "the viewer's entry file, the Streamlit script `air view` runs",
}
MAX_LINES = 400

# What each folder of air/ may import (besides itself). The order is the layering bottom-up; a folder
# never reaches up. Top-level modules (air/*.py, air_mlgym, simple_env) are entry points: anything.
ALLOWED = {
    "sandbox": set(),
    "tasks": {"sandbox"},
    "env": {"sandbox", "tasks"},
    "policies": {"env"},
    "serving": {"env", "policies"},
    "runs": {"sandbox", "tasks", "env", "policies", "serving"},
    "launch": {"sandbox", "tasks", "env"},
    "fleet": {"sandbox", "launch"},
    "rehearsal": {"sandbox", "tasks", "env", "policies", "serving", "launch", "fleet"},
    "viewer": {"tasks", "env"},
    "cli": {"sandbox", "tasks", "env", "policies", "serving", "runs", "launch", "rehearsal", "viewer", "fleet"},
}
# The only modules that import verifiers themselves; everything else reaches it through them or not at all.
VERIFIERS_IMPORTERS = {
    "air.env.mlgym_env",
    "air.env.v1_front",
    "air.env.v1_player",
    "air.env.load",
    "air.env.v1_serve",
    "air_mlgym",
    "simple_env",
}


def _source_files() -> dict[str, Path]:
    files = {}
    for path in PACKAGE.rglob("*.py"):
        if "builtin" in path.relative_to(PACKAGE).parts:  # task data (evaluate.py, baselines), not our code
            continue
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        files[name] = path
    for name in TOP_LEVEL:
        files[name] = ROOT / f"{name}.py"
    return files


FILES = _source_files()


def _imports(path: Path, name: str | None = None) -> set[str]:
    """Every module ``path`` imports, wherever the import stands (functions and TYPE_CHECKING too); relative
    imports too when its module ``name`` is given."""
    package = (name or "").split(".")[: None if path.name == "__init__.py" else -1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.level == 0 or name is not None):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            if module:
                found.add(module)
            found.update(f"{module}.{a.name}".strip(".") for a in node.names)  # `from air.viewer import stats`
    return found


def _imports_outside(paths: list[Path], allowed: set[str]) -> list[str]:
    """``path: module`` for every import of ``paths`` whose top-level name is not in ``allowed`` (the standard
    library and ``__future__`` are always allowed)."""
    allowed = allowed | set(sys.stdlib_module_names) | {"__future__"}
    wrong = {
        f"{path.relative_to(ROOT)}: {name}"
        for path in paths
        for name in _imports(path)
        if name.split(".")[0] not in allowed
    }
    return sorted(wrong)


def _graph() -> dict[str, set[str]]:
    return {name: {m for m in _imports(path) if m in FILES and m != name} for name, path in FILES.items()}


def _folder(module: str) -> str | None:
    """The folder of air/ a module lives in; None for the entry points (air/*.py and the top-level env ids)."""
    parts = FILES[module].relative_to(ROOT).parts
    return parts[1] if parts[0] == "air" and len(parts) > 2 else None


def test_the_package_top_level_holds_only_the_modules_that_say_why() -> None:
    assert {p.stem for p in PACKAGE.glob("*.py")} == set(TOP_OF_AIR)
    assert set(ALLOWED) == {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}


@pytest.mark.parametrize("module", sorted(FILES))
def test_no_module_is_long(module: str) -> None:
    lines = len(FILES[module].read_text().splitlines())
    assert lines <= MAX_LINES, f"{FILES[module].relative_to(ROOT)} has {lines} lines (at most {MAX_LINES})"


def _first_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def test_the_import_graph_has_no_cycle() -> None:
    """Over the whole tree: air, the env ids, rigs, tests, benchmarks, scripts, prime-rl's side."""
    graph = _tree_graph()
    cycle = _first_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])
    # The graph holds every part of the tree, and sees imports inside functions and relative ones.
    assert {Path(path).parts[0].removesuffix(".py") for path in graph} >= {*TREE_LAYERS, "prime_rl_side"}
    assert {"benchmarks/fleet_scale.py", "rigs/fleet.py"} <= graph["benchmarks/fleet.py"]
    assert "air/fleet/node.py" in graph["rigs/fleet.py"]  # imported inside a function
    assert "air/tasks/scripts/proc_table.py" in graph["air/tasks/scripts/agent_freeze.py"]


def test_each_folder_imports_only_the_layers_below_it() -> None:
    wrong = []
    for module, targets in _graph().items():
        folder = _folder(module)
        if folder is None:
            continue
        for target in targets:
            other = _folder(target)
            if other is None and target.startswith("air") and target != "air":
                wrong.append(f"{module} imports the entry point {target}")
            elif other is not None and other != folder and other not in ALLOWED[folder]:
                wrong.append(f"{module} ({folder}/) imports {target} ({other}/)")
    assert not wrong, "\n".join(sorted(wrong))


def test_verifiers_is_imported_only_where_the_env_meets_it() -> None:
    importers = {name for name, path in FILES.items() if any(m.split(".")[0] == "verifiers" for m in _imports(path))}
    assert importers <= VERIFIERS_IMPORTERS, sorted(importers - VERIFIERS_IMPORTERS)


def test_the_layers_below_the_env_front_load_without_verifiers() -> None:
    """Sandbox, tasks, rewards, trajectories, policies, the inference stand-in and the viewer's data work
    without verifiers: imported in a fresh interpreter, none of them pulls it in (the core serves both
    fronts, classic and v1)."""
    free = sorted(
        m
        for m in FILES
        if (_folder(m) in {"sandbox", "tasks", "policies", "serving", "viewer"} and ".scripts." not in m)
        or (
            _folder(m) == "env"
            and m not in {"air.env.mlgym_env", "air.env.v1_front", "air.env.v1_player", "air.env.load"}
        )
    )
    code = (
        "import importlib, sys\n"
        f"for name in {free!r}:\n"
        "    importlib.import_module(name)\n"
        "    if 'verifiers' in sys.modules:\n"
        "        sys.exit(f'{name} imported verifiers')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=backstop(300))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "air.env.trajectories" in free and "air.serving.server" in free and "air.sandbox.pool" in free


OPTIONAL_IN_SCRIPTS = {"numpy"}  # imported under `except ImportError` (seeding), never required


def test_the_evaluation_scripts_need_only_the_standard_library() -> None:
    """air/tasks/scripts/*.py run inside the sandbox, with whatever Python the task's image has (root's
    runner, the evaluator, the agent's worker): they import the standard library and each other only."""
    scripts = PACKAGE / "tasks" / "scripts"
    local = {p.stem for p in scripts.glob("*.py")}
    wrong = _imports_outside(sorted(scripts.glob("*.py")), local | OPTIONAL_IN_SCRIPTS)
    assert not wrong, wrong


REHEARSAL = PACKAGE / "rehearsal"
GENERATION_FOLDERS = ("classic", "v1")  # air/rehearsal/<generation>/: one implementation each of its protocol


def test_the_rehearsal_has_no_generation_twins() -> None:
    """One path over both prime-rl generations: a generation's code lives in its own folder, never as a
    ``v1_<x>.py`` (or ``classic_<x>.py``) beside ``<x>.py``."""
    twins = [
        str(path.relative_to(ROOT))
        for path in REHEARSAL.rglob("*.py")
        for prefix in (f"{g}_" for g in GENERATION_FOLDERS)
        if path.stem.startswith(prefix) and (path.parent / f"{path.stem[len(prefix) :]}.py").exists()
    ]
    assert not twins, twins


def test_a_rehearsal_generation_never_imports_the_other() -> None:
    wrong = [
        f"{module} imports {target}"
        for module, targets in _graph().items()
        for generation in GENERATION_FOLDERS
        if module.startswith(f"air.rehearsal.{generation}.")
        for target in targets
        for other in GENERATION_FOLDERS
        if other != generation and target.startswith(f"air.rehearsal.{other}")
    ]
    assert not wrong, wrong


PRIME_RL_SIDE = ROOT / "prime_rl_side"  # what runs inside prime-rl's venv: package air_prime_rl, the stand-ins
# What air_prime_rl may import besides the standard library, torch, prime_rl and itself: packages prime-rl's own
# venv provides that it already uses (prime-rl's dependencies at both pins), each with why.
PRIME_RL_VENV_PROVIDES = {
    "msgspec",  # classic.entry: prime-rl's own batch decoder (TrainingBatch is a msgspec struct)
    "tomli_w",  # classic.entry, classic.trainer: the derived configs written as TOML, as prime-rl writes them
    "flash_attn",  # v1.trainer: whether flash-attn is real or the import-only stand-in (stand_ins/cpu)
    "transformers",  # score_texts: the trainer's weights run as transformers runs them (a prime-rl dependency)
    "safetensors",  # score_texts: the broadcast folder's files, as prime-rl writes them
}


def test_the_prime_rl_side_imports_only_the_standard_library_torch_and_prime_rl() -> None:
    """prime_rl_side/air_prime_rl runs in someone else's environment (prime-rl's venv, started by air
    rehearse): never `air`, nor anything that venv may lack."""
    package = PRIME_RL_SIDE / "air_prime_rl"
    wrong = _imports_outside(
        sorted(package.rglob("*.py")), {"torch", "prime_rl", "air_prime_rl"} | PRIME_RL_VENV_PROVIDES
    )
    assert not wrong, wrong
    assert {p.stem for p in package.rglob("*.py")} >= {"entry", "trainer", "cpu_torch", "sdpa_varlen", "trainer_probe"}


def test_the_import_stand_ins_import_only_the_standard_library_and_each_other() -> None:
    """prime_rl_side/stand_ins/{cpu,gpu}: import-only packages put on prime-rl's venv path after its own."""
    stand_ins = PRIME_RL_SIDE / "stand_ins"
    own = {p.name for folder in stand_ins.iterdir() if folder.is_dir() for p in folder.iterdir() if p.is_dir()}
    wrong = _imports_outside(sorted(stand_ins.rglob("*.py")), own)
    assert not wrong, wrong
    assert "air_prime_rl" not in own  # the package is installed, never put on the path as a stand-in


def test_no_prime_rl_side_module_is_long() -> None:
    """The size rule holds for what runs inside prime-rl's venv too (air_prime_rl and the stand-ins)."""
    long = {
        str(path.relative_to(ROOT)): lines
        for path in PRIME_RL_SIDE.rglob("*.py")
        if (lines := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines: {long}"


# --- the whole tree ---------------------------------------------------------------------------------------------
# Where the tree's code is imported from (each a sys.path entry of its own) and what lies there: None for all.
# The sandbox's scripts import each other by bare name (they are copied in together).
TREE_PATHS = {
    ROOT: ("air", "air_mlgym.py", "simple_env.py", "rigs", "tests", "benchmarks", "scripts"),
    PRIME_RL_SIDE: ("air_prime_rl",),
    ROOT / "rl_launcher": ("air_rl_launcher",),  # the project's `rl` script: only air/cli/rl_command.py behind it
    PRIME_RL_SIDE / "stand_ins" / "cpu": None,
    PRIME_RL_SIDE / "stand_ins" / "gpu": None,
    PACKAGE / "tasks" / "scripts": None,
}
# What each part of the checkout may import of the others: tests -> rigs <- benchmarks, all -> air, and nothing
# imports tests, benchmarks or scripts.
TREE_LAYERS = {
    "air": set(),
    "air_mlgym": {"air"},
    "simple_env": {"air"},
    "rigs": {"air"},
    "tests": {"air", "air_mlgym", "simple_env", "rigs"},
    "benchmarks": {"air", "air_mlgym", "simple_env", "rigs"},
    "scripts": {"air"},
    "rl_launcher": {"air"},
}


def _tree_graph() -> dict[str, set[str]]:
    """File -> the files it imports, paths relative to the checkout; an import resolves where it runs."""
    graph: dict[str, set[str]] = {}
    for base, entries in TREE_PATHS.items():
        paths = [base / entry for entry in entries] if entries else [base]
        files = [f for p in paths for f in ([p] if p.suffix == ".py" else p.rglob("*.py"))]
        modules = {}
        for path in files:
            if "builtin" in path.relative_to(base).parts:  # task data (evaluate.py, baselines), not our code
                continue
            parts = path.relative_to(base).with_suffix("").parts
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
        for name, path in modules.items():
            targets = {modules[m] for m in _imports(path, name) if m in modules and modules[m] != path}
            graph.setdefault(str(path.relative_to(ROOT)), set()).update(str(t.relative_to(ROOT)) for t in targets)
    return graph


def test_each_part_of_the_tree_imports_only_the_parts_it_builds_on() -> None:
    """benchmarks/ and tests/ share their rigs through rigs/, never one importing the other; air imports none
    of them."""
    wrong = [
        f"{source} imports {target}"
        for source, targets in _tree_graph().items()
        if (part := Path(source).parts[0].removesuffix(".py")) in TREE_LAYERS
        for target in targets
        if (other := Path(target).parts[0].removesuffix(".py")) != part and other not in TREE_LAYERS[part]
    ]
    assert not wrong, "\n".join(sorted(wrong))


def test_scripts_hold_one_prime_rl_install_script() -> None:
    """One install route (issue 63): its steps live in prime_rl_side/install/, sourced by that script."""
    assert sorted(p.name for p in (ROOT / "scripts").iterdir() if "install" in p.name) == ["install_prime_rl.sh"]
    script = (ROOT / "scripts" / "install_prime_rl.sh").read_text()
    for step in (ROOT / "prime_rl_side" / "install").glob("*.sh"):
        assert f"prime_rl_side/install/{step.name}" in script + "".join(
            p.read_text() for p in step.parent.glob("*.sh") if p != step
        ), f"{step} is sourced by nothing"
