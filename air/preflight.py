"""``air check``: everything a training run needs, checked before any GPU is touched.

Each check returns rows of pass / warn / fail / n/a, each failure with its fix. Nothing here starts a
container, loads a model or signals a process. Checks that need a GPU report "n/a" plainly on a
machine without one; the rest still run. Network probes use short timeouts, so the whole check
stays well under 20 seconds.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from air.rl_config import (
    PRIME_RL_COMMIT,
    EnvEntry,
    LoadedConfig,
    check_config_files,
    env_entries,
    gpu_key,
    gpu_sets,
)

Status = Literal["pass", "warn", "fail", "n/a"]
NET_TIMEOUT_S = 3.0
VERIFIERS_RANGE = ">=0.1.10.dev0,<0.1.11"  # the same range as pyproject.toml


@dataclass(frozen=True)
class CheckRow:
    check: str
    status: Status
    detail: str
    fix: str = ""

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


@dataclass
class PreflightOptions:
    configs: list[Path] = field(default_factory=list)
    endpoint: str | None = None  # an inference server to probe (.../v1)
    prime_rl_dir: str | None = None
    state_dir: str | None = None  # where recorded process trees live (tests)
    nvidia_smi: str | None = None  # the executable (tests point it at a fake)


@dataclass
class _Context:
    options: PreflightOptions
    configs: list[LoadedConfig] = field(default_factory=list)
    config_ok: bool = True
    failed_tasks: set[str] = field(default_factory=set)
    own_pids: set[int] = field(default_factory=set)

    @property
    def envs(self) -> list[EnvEntry]:
        entries = [e for c in self.configs for e in env_entries(c)]
        if not self.options.configs:  # no config: the env as `air standalone` would load it
            return [EnvEntry(0, "air_mlgym", "air_mlgym (defaults)", {})]
        return entries

    @property
    def our_envs(self) -> list[EnvEntry]:
        return [e for e in self.envs if e.id == "air_mlgym"]


Check = Callable[[_Context], Iterator[CheckRow]]


def run_preflight(options: PreflightOptions, on_row: Callable[[CheckRow], None] | None = None) -> list[CheckRow]:
    ctx = _Context(options)
    rows: list[CheckRow] = []
    for check in CHECKS:
        try:
            produced = list(check(ctx))
        except Exception as exc:  # a broken check is reported, never fatal to the others
            produced = [CheckRow(check.__name__.removeprefix("check_"), "fail", f"the check itself failed: {exc!r}")]
        for row in produced:
            rows.append(row)
            if on_row:
                on_row(row)
    return rows


def exit_code(rows: list[CheckRow]) -> int:
    return 1 if any(r.status == "fail" for r in rows) else 0


# --------------------------------------------------------------------------- the checks


def check_config(ctx: _Context) -> Iterator[CheckRow]:
    if not ctx.options.configs:
        yield CheckRow("config", "n/a", "no --config given: checking the env with its defaults")
        return
    report = check_config_files(ctx.options.configs)
    ctx.configs = report.configs
    for problem in report.problems:
        ctx.config_ok = False
        yield CheckRow("config", "fail", str(problem), problem.fix)
    for config in report.configs:
        if not any(p.file == config.label for p in report.problems):
            yield CheckRow(
                "config",
                "pass",
                f"{config.path.name} ({config.kind}): prime-rl {PRIME_RL_COMMIT} schema and cross-field rules",
            )


def check_docker(ctx: _Context) -> Iterator[CheckRow]:
    from air.sandbox import SandboxConfig, SandboxError, docker_client

    try:
        client = docker_client()
        version = client.version().get("Version", "?")
    except SandboxError as exc:
        yield CheckRow(
            "docker",
            "fail",
            str(exc).split(" Start one")[0],
            "start it: `sudo systemctl start docker` or `sudo dockerd &`; or add yourself to the docker group",
        )
        yield CheckRow("sandbox image", "n/a", "no Docker engine to ask")
        return
    yield CheckRow("docker", "pass", f"engine {version} answers")
    images = sorted({str(e.args.get("image") or "") for e in ctx.our_envs} or {""})
    for image in images:
        tag = SandboxConfig(image=image).resolved_image()
        try:
            client.images.get(tag)
            yield CheckRow("sandbox image", "pass", f"{tag} present")
        except Exception:
            fix = "uv run air build-image" if not image else f"build or load {tag}"
            yield CheckRow("sandbox image", "fail", f"{tag} is not in the engine", fix)
    if any(e.args.get("env_gpu") for e in ctx.our_envs):
        runtimes = set((client.info().get("Runtimes") or {}).keys())
        if "nvidia" not in runtimes:
            yield CheckRow(
                "container GPUs",
                "warn",
                f"env_gpu is set but Docker has no 'nvidia' runtime (runtimes: {', '.join(sorted(runtimes))})",
                "install the NVIDIA Container Toolkit and run `sudo nvidia-ctk runtime configure --runtime=docker`",
            )


def check_tasks(ctx: _Context) -> Iterator[CheckRow]:
    from air.env_settings import env_settings_problems
    from air.tasks import TaskError, generator_command, list_tasks, load_task, resolve_task_root

    seen_roots: dict[str, Path | None] = {}
    for entry in ctx.our_envs:
        if env_settings_problems(dict(entry.args)):
            continue  # the config rows name the bad argument
        raw_root = entry.args.get("task_root")
        key = str(raw_root)
        if key not in seen_roots:
            try:
                root = resolve_task_root(raw_root)
                source = "task_root" if raw_root else ("$MLGYM_ROOT" if os.environ.get("MLGYM_ROOT") else "built-in")
                seen_roots[key] = root
                yield CheckRow("task root", "pass", f"{root} ({source})")
            except TaskError as exc:
                seen_roots[key] = None
                yield CheckRow(
                    "task root",
                    "fail",
                    str(exc),
                    "export MLGYM_ROOT=/path/to/MLGym (a checkout of facebookresearch/MLGym)",
                )
        root = seen_roots[key]
        if root is None:
            ctx.failed_tasks.update(entry.args.get("task_configs") or [])
            continue
        for name in entry.args.get("task_configs") or list_tasks(root):
            try:
                task = load_task(name, root)
            except TaskError as exc:
                ctx.failed_tasks.add(name)
                yield CheckRow(f"task {name}", "fail", str(exc), _unknown_task_fix(str(exc), root))
                continue
            try:
                files = task.workspace_files()
            except TaskError as exc:
                ctx.failed_tasks.add(name)
                local = [root / d.data_path for d in task.datasets if d.is_local]
                fix = next(filter(None, map(generator_command, local)), "restore the missing files in the task root")
                yield CheckRow(f"task {name}", "fail", str(exc), fix)
                continue
            remote = [d for d in task.datasets if not d.is_local]
            detail = f"{len(files)} workspace files; baseline {task.primary_metric} = {task.baseline_score}"
            if not remote:
                yield CheckRow(f"task {name}", "pass", detail)
                continue
            yield from _remote_dataset_rows(name, [d.data_path for d in remote], bool(entry.args.get("network")))


def _unknown_task_fix(message: str, root: Path) -> str:
    if "Known tasks" in message:
        from air.tasks import BUILTIN_TASK_ROOT

        if root == BUILTIN_TASK_ROOT.resolve():
            return "it is an MLGym task: export MLGYM_ROOT=/path/to/MLGym (a checkout of facebookresearch/MLGym)"
        return f"use one of the task configs in {root}/configs/tasks"
    return "fix the task config the message names"


def _remote_dataset_rows(task: str, ids: list[str], network: bool) -> Iterator[CheckRow]:
    import httpx

    listing = ", ".join(ids)
    if not network:
        yield CheckRow(
            f"task {task}",
            "fail",
            f"downloads {listing} from the Hugging Face hub at run time, but its containers have no network",
            "add network = true to this env's args",
        )
        return
    hub = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    try:
        response = httpx.head(f"{hub}/api/datasets/{ids[0]}", timeout=NET_TIMEOUT_S, follow_redirects=True)
        reachable = response.status_code < 500
        why = f"HTTP {response.status_code}"
    except httpx.HTTPError as exc:
        reachable, why = False, type(exc).__name__
    if reachable:
        yield CheckRow(f"task {task}", "pass", f"downloads {listing} from {hub} at run time ({why} from here)")
    else:
        yield CheckRow(
            f"task {task}",
            "warn",
            f"downloads {listing} from {hub} at run time, which this machine cannot reach ({why})",
            "give the node Hugging Face access (or HF_ENDPOINT to a mirror) before training",
        )


def check_gpus(ctx: _Context) -> Iterator[CheckRow]:
    from air.gpus import GpuQueryError, GpuRole, check_layout, describe_inventory, query_gpus

    roles = []
    for config in ctx.configs:
        for name, ids in gpu_sets(config).items():
            roles.append(GpuRole(name, ids, gpu_key(config, name)))
    try:
        inventory = query_gpus(ctx.options.nvidia_smi, timeout=5.0)
    except GpuQueryError as exc:
        yield CheckRow("gpus", "fail", f"nvidia-smi failed: {exc}", "check the NVIDIA driver (`nvidia-smi`)")
        return
    if inventory is None:
        layout = "; ".join(f"{r.name} {','.join(map(str, r.gpu_ids))}" for r in roles) or "none configured"
        yield CheckRow(
            "gpus",
            "n/a",
            f"no NVIDIA GPU on this machine (nvidia-smi not found): the GPU layout ({layout}) is not checked",
            "run `air check` on the GPU node before training",
        )
        return
    yield CheckRow("gpus", "pass", describe_inventory(inventory))
    for finding in check_layout(roles, inventory, own_pids=ctx.own_pids):
        yield CheckRow("gpu layout", finding.status, finding.message, finding.fix)


def check_endpoint(ctx: _Context) -> Iterator[CheckRow]:
    import httpx

    url = ctx.options.endpoint
    model = None
    for config in ctx.configs:
        if config.kind == "orchestrator" and not url:
            urls = (config.data.get("client") or {}).get("base_url") or ["http://localhost:8000/v1"]
            url = urls[0] if isinstance(urls, list) else str(urls)
        model = model or (config.data.get("model") or {}).get("name")
    if not url:
        started = any(c.kind == "rl" and c.data.get("inference") is not None for c in ctx.configs)
        why = "`rl` starts vLLM itself" if started else "no --endpoint given"
        yield CheckRow("inference endpoint", "n/a", why)
        return
    url = url.rstrip("/")
    key = os.environ.get("OPENAI_API_KEY", "EMPTY")
    try:
        response = httpx.get(f"{url}/models", timeout=NET_TIMEOUT_S, headers={"Authorization": f"Bearer {key}"})
        response.raise_for_status()
        served = [m.get("id") for m in response.json().get("data", [])]
    except (httpx.HTTPError, ValueError) as exc:
        yield CheckRow(
            "inference endpoint",
            "fail",
            f"{url} does not answer /models: {exc}",
            "start the server first (`uv run inference @ configs/mlgym/infer.toml`) or fix the URL",
        )
        return
    if model and model not in served:
        yield CheckRow(
            "inference endpoint", "warn", f"{url} serves {', '.join(served) or 'nothing'}, not {model}", "check [model]"
        )
    else:
        yield CheckRow("inference endpoint", "pass", f"{url} serves {', '.join(map(str, served))}")


def check_prime_rl(ctx: _Context) -> Iterator[CheckRow]:
    from packaging.specifiers import SpecifierSet

    from air.prime_rl import find_prime_rl

    install = find_prime_rl(ctx.options.prime_rl_dir)
    if install is None:
        yield CheckRow(
            "prime-rl",
            "warn",
            "not installed here (no $PRIME_RL_DIR, no ~/prime-rl, not importable); the configs were checked "
            "against its schema, which air ships",
            "bash scripts/install_prime_rl.sh (clones it at the pinned commit and installs air into its venv)",
        )
        return
    if not (install.root / "pyproject.toml").exists():
        yield CheckRow("prime-rl", "fail", f"{install.root} (from {install.source}) is not a prime-rl checkout")
        return
    commit = install.commit()
    if commit is None or not commit.startswith(PRIME_RL_COMMIT):
        yield CheckRow(
            "prime-rl",
            "fail",
            f"{install.root} is at {commit[:12] if commit else 'an unknown commit'}, not {PRIME_RL_COMMIT}: "
            "its config schema differs",
            f"git -C {install.root} checkout {PRIME_RL_COMMIT} && (cd {install.root} && uv sync)",
        )
    else:
        yield CheckRow("prime-rl", "pass", f"{install.root} at {PRIME_RL_COMMIT} (from {install.source})")
    probe = install.probe_venv()
    if isinstance(probe, str):
        yield CheckRow("prime-rl venv", "fail", probe, "bash scripts/install_prime_rl.sh")
        return
    problems = []
    if not probe.get("air_mlgym"):
        problems.append(f"air_mlgym is not importable there ({probe.get('air_mlgym_error', 'not installed')})")
    version = probe.get("verifiers")
    if not version or version not in SpecifierSet(VERIFIERS_RANGE, prereleases=True):
        problems.append(f"verifiers {version} is outside {VERIFIERS_RANGE}")
    if problems:
        yield CheckRow("prime-rl venv", "fail", "; ".join(problems), "bash scripts/install_prime_rl.sh")
    else:
        yield CheckRow("prime-rl venv", "pass", f"air-agent {probe.get('air-agent')}, verifiers {version}")


def check_env_loads(ctx: _Context) -> Iterator[CheckRow]:
    import datasets
    import verifiers as vf

    from air.env_settings import env_settings_problems

    datasets.disable_progress_bars()  # one table, no bars between its rows
    for entry in ctx.envs:
        label = f"load {entry.name}"
        if entry.id == "air_mlgym" and env_settings_problems(dict(entry.args)):
            yield CheckRow(label, "n/a", "skipped: its arguments are wrong (see the config rows)")
            continue
        if set(entry.args.get("task_configs") or []) & ctx.failed_tasks:
            yield CheckRow(label, "n/a", "skipped: a task of it is broken (see the task rows)")
            continue
        started = time.perf_counter()
        try:
            env = vf.load_environment(entry.id, **entry.args)  # as prime-rl's orchestrator calls it
            rows = len(env.get_dataset())
        except Exception as exc:
            cause = exc.__cause__ or exc
            yield CheckRow(label, "fail", f"vf.load_environment({entry.id!r}, ...) failed: {cause}", _load_fix(entry))
            continue
        took = time.perf_counter() - started
        yield CheckRow(label, "pass", f"vf.load_environment({entry.id!r}): {rows} rows in {took:.1f} s")


def _load_fix(entry: EnvEntry) -> str:
    if entry.id in ("air_mlgym", "simple_env"):
        return "fix the env's args in the config"
    return f"install the env into this venv (`uv pip install {entry.id}`)"


def check_leftovers(ctx: _Context) -> Iterator[CheckRow]:
    from air.cleanup import plan_clean
    from air.process_registry import live_processes, load_records

    records, _ = load_records(ctx.options.state_dir)
    for record in records:
        ctx.own_pids.update(p.pid for p in live_processes(record))
    plan = plan_clean(state_dir=ctx.options.state_dir)
    parts = []
    if plan.containers:
        parts.append(f"{len(plan.containers)} sandbox container(s) of dead processes")
    if plan.processes:
        runs = sorted({p.run_id for p in plan.processes})
        parts.append(f"{len(plan.processes)} process(es) left by run(s) {', '.join(runs)}")
    if parts:
        yield CheckRow("leftovers", "warn", "; ".join(parts), "air clean (shows them; --yes stops them)")
    else:
        yield CheckRow("leftovers", "pass", "no containers or recorded processes left by earlier runs")
    for line in plan.skipped_running:
        yield CheckRow("running", "warn", f"still running: {line}", "wait for it, or `air clean --include-running`")


# Leftovers first: the GPU check labels processes air recorded.
CHECKS: list[Check] = [
    check_config,
    check_docker,
    check_tasks,
    check_leftovers,
    check_gpus,
    check_endpoint,
    check_prime_rl,
    check_env_loads,
]


def rows_as_json(rows: list[CheckRow]) -> list[dict[str, Any]]:
    return [r.as_dict() for r in rows]
