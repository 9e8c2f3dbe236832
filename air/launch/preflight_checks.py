"""Preflight checks of what the config names: the config itself, Docker and the image, the tasks, the env
loading with its arguments, and leftovers of earlier runs."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from air.launch.config_files import PRIME_RL_COMMIT, EnvEntry, LoadedConfig
from air.launch.config_rules import check_config_files
from air.launch.config_v1 import V1_COMMIT, beyond_loopback, serve_addresses
from air.launch.preflight_rows import NET_TIMEOUT_S, CheckRow, PreflightContext


def check_config(ctx: PreflightContext) -> Iterator[CheckRow]:
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
                f"{config.path.name} ({config.kind}, {config.generation}): prime-rl "
                f"{V1_COMMIT if config.generation == 'v1' else PRIME_RL_COMMIT} schema and cross-field rules",
            )
        yield from _exposed_env_server_rows(config)


# What prime-rl's env server (verifiers' ZMQ EnvServer) lets anyone who reaches its port do: it has no
# authentication or encryption, and a request names its own model endpoint and API-key variable.
EXPOSURE = (
    "prime-rl's env server (ZMQ) authenticates and encrypts nothing: whoever reaches the port can run episodes "
    "with a model endpoint of their own (its replies are the commands run in that node's sandbox containers), "
    "read the traces and rewards, and make the server send any of its environment variables as an API key to a "
    "URL they choose"
)
PROTECTION = (
    "bind tcp://127.0.0.1:PORT on the env node and reach it through an SSH tunnel from the orchestrator's node "
    "(ssh -N -L LOCAL:127.0.0.1:PORT env-node, the source's serve.address tcp://127.0.0.1:LOCAL); or bind a "
    "private interface only (WireGuard, a VPC address) behind a firewall that admits the orchestrator's node "
    "alone (not Docker's bridge subnets: sandboxes given network = true reach their host's addresses)"
)


def _exposed_env_server_rows(config: LoadedConfig) -> Iterator[CheckRow]:
    """A warning for each ``serve.address`` that is not loopback: an env server's bind, or a source's server."""
    for key, address in serve_addresses(config.data):
        if not beyond_loopback(address):
            continue
        where = "binds the env server" if config.kind == "env-server" else "points at an env server listening"
        said = f"{config.label}: {key} = {address!r} {where} beyond loopback. {EXPOSURE}"
        yield CheckRow("env server address", "warn", said, PROTECTION)


def check_docker(ctx: PreflightContext) -> Iterator[CheckRow]:
    from air.sandbox.config import SandboxConfig
    from air.sandbox.container import docker_client
    from air.sandbox.errors import SandboxError

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
    yield disk_quota_row(client)
    if any(e.args.get("env_gpu") for e in ctx.our_envs):
        runtimes = set((client.info().get("Runtimes") or {}).keys())
        if "nvidia" not in runtimes:
            yield CheckRow(
                "container GPUs",
                "warn",
                f"env_gpu is set but Docker has no 'nvidia' runtime (runtimes: {', '.join(sorted(runtimes))})",
                "install the NVIDIA Container Toolkit and run `sudo nvidia-ctk runtime configure --runtime=docker`",
            )


def disk_quota_row(client: Any) -> CheckRow:
    """Whether the engine gives each sandbox a disk quota or the watch keeps the limit (docs/sandbox.md)."""
    from air.sandbox.storage import driver_or_none, quota_summary

    quota, said = quota_summary(driver_or_none(client))  # the step to get one is in what it says
    return CheckRow("disk", "pass" if quota else "warn", said)


def check_tasks(ctx: PreflightContext) -> Iterator[CheckRow]:
    from air.env.settings import env_settings_problems
    from air.tasks.config import TaskError
    from air.tasks.loader import MissingDataError, list_tasks, load_task, resolve_task_root, task_root_source

    seen_roots: dict[str, Path | None] = {}
    for entry in ctx.our_envs:
        if env_settings_problems(dict(entry.args)):
            continue  # the config rows name the bad argument
        raw_root = entry.args.get("task_root")
        key = str(raw_root)
        if key not in seen_roots:
            try:
                root = resolve_task_root(raw_root)
                source = (
                    "task_root" if raw_root else task_root_source(None)[1].replace("the built-in tasks", "built-in")
                )
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
                yield CheckRow(f"task {name}", "fail", str(exc), _unknown_task_fix(name, str(exc), root))
                continue
            try:
                files = task.workspace_files()
            except TaskError as exc:
                ctx.failed_tasks.add(name)
                fix = exc.fix if isinstance(exc, MissingDataError) else "restore the missing files in the task root"
                yield CheckRow(f"task {name}", "fail", str(exc), fix)
                continue
            remote = [d for d in task.datasets if not d.is_local]
            detail = f"{len(files)} workspace files; baseline {task.primary_metric} = {task.baseline_score}"
            if not remote:
                yield CheckRow(f"task {name}", "pass", detail)
                continue
            yield from _remote_dataset_rows(name, [d.data_path for d in remote], bool(entry.args.get("network")))


def _unknown_task_fix(name: str, message: str, root: Path) -> str:
    if "Known tasks" in message:
        from air.tasks.loader import BUILTIN_TASK_ROOT
        from air.tasks.names import MLGYM_ROOT_FIX, is_mlgym_task

        if root == BUILTIN_TASK_ROOT.resolve() and is_mlgym_task(name):
            return f"it is an MLGym task: {MLGYM_ROOT_FIX}"
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


def check_env_loads(ctx: PreflightContext) -> Iterator[CheckRow]:
    import datasets

    from air.env.load import count_env_rows
    from air.env.settings import env_settings_problems

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
            rows, how = count_env_rows(entry.id, dict(entry.args))  # as prime-rl's orchestrator loads it
        except Exception as exc:
            cause = exc.__cause__ or exc
            yield CheckRow(label, "fail", f"loading {entry.id!r} failed: {cause}", _load_fix(entry))
            continue
        took = time.perf_counter() - started
        yield CheckRow(label, "pass", f"{how}: {rows} rows in {took:.1f} s")


def _load_fix(entry: EnvEntry) -> str:
    if entry.id in ("air_mlgym", "simple_env"):
        return "fix the env's args in the config"
    return f"install the env into this venv (`uv pip install {entry.id}`)"


def check_leftovers(ctx: PreflightContext) -> Iterator[CheckRow]:
    from air.launch.cleanup import plan_clean
    from air.launch.process_control import live_processes
    from air.launch.process_records import load_records

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
        yield CheckRow("leftovers", "warn", "; ".join(parts), "`air clean` shows them, `air clean --yes` stops them")
    else:
        yield CheckRow("leftovers", "pass", "no containers or recorded processes left by earlier runs")
    for line in plan.skipped_running:
        yield CheckRow("running", "warn", f"still running: {line}", "wait for it, or `air clean --include-running`")
