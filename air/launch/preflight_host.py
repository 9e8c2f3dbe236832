"""Preflight checks of the machine around the config: GPUs, the inference endpoint, prime-rl's install."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from air.launch.config_files import PRIME_RL_COMMIT
from air.launch.config_rules import gpu_key, gpu_sets
from air.launch.config_v1 import CONFIG_FOLDERS, V1_COMMIT
from air.launch.preflight_rows import NET_TIMEOUT_S, CheckRow, PreflightContext

VERIFIERS_RANGE = ">=0.1.10.dev0,<0.1.11"  # the classic extra's range in pyproject.toml


def check_gpus(ctx: PreflightContext) -> Iterator[CheckRow]:
    from air.launch.gpus import GpuQueryError, GpuRole, check_layout, describe_inventory, query_gpus

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


def check_endpoint(ctx: PreflightContext) -> Iterator[CheckRow]:
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


def _recorded_install(ctx: PreflightContext):
    """The install `uv run rl` uses for the configs' generation (install_prime_rl.sh records it), unless
    $PRIME_RL_DIR names another: what `air check --config C` checks is what `uv run rl @ C` would run."""
    from air.launch.installs import InstallProblem, install_for
    from air.launch.prime_rl import PrimeRlInstall

    generations = {c.generation for c in ctx.configs}
    if os.environ.get("PRIME_RL_DIR") or len(generations) != 1:
        return None
    generation = generations.pop()
    try:
        root = install_for(generation).root
    except InstallProblem:
        return None
    return PrimeRlInstall(root, f"recorded for {generation} configs: `uv run rl --which`")


def check_prime_rl(ctx: PreflightContext) -> Iterator[CheckRow]:
    from packaging.specifiers import SpecifierSet

    from air.launch.prime_rl import find_prime_rl, same_commit

    install = (None if ctx.options.prime_rl_dir else _recorded_install(ctx)) or find_prime_rl(ctx.options.prime_rl_dir)
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
    generation, commit = install.generation(), install.commit()
    yield from _generation_rows(ctx, install.root, generation)
    if generation == "v1":
        if same_commit(commit, V1_COMMIT):
            yield CheckRow("prime-rl", "pass", f"{install.root} at {V1_COMMIT}, v1 (from {install.source})")
        else:
            yield CheckRow(
                "prime-rl",
                "warn",
                f"{install.root} is v1 at {commit[:12] if commit else 'an unknown commit'}; configs/mlgym-v1 and the "
                f"shipped schema were checked against {V1_COMMIT}: keys may have moved since",
                f"git -C {install.root} checkout {V1_COMMIT}, or check the config with prime-rl's own `rl --dry-run`",
            )
    elif commit is None or not commit.startswith(PRIME_RL_COMMIT):
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
    if generation == "v1":
        if probe.get("air_mlgym") and not probe.get("v1_front"):
            problems.append(f"verifiers {version} there has no verifiers.v1: air_mlgym's v1 front cannot load")
    elif not version or version not in SpecifierSet(VERIFIERS_RANGE, prereleases=True):
        problems.append(f"verifiers {version} is outside {VERIFIERS_RANGE}")
    if problems:
        yield CheckRow("prime-rl venv", "fail", "; ".join(problems), "bash scripts/install_prime_rl.sh")
    else:
        front = "v1 front" if generation == "v1" else "classic front"
        yield CheckRow(
            "prime-rl venv",
            "pass",
            f"air-mlgym {probe.get('air-mlgym')} ({front}), verifiers {version}, in {install.venv.name}",
        )


def _generation_rows(ctx: PreflightContext, root: Path, generation: str) -> Iterator[CheckRow]:
    """A config written for the other generation of prime-rl than the one installed: named, with the fix."""
    other = "classic" if generation == "v1" else "v1"
    how = {"classic": f"--commit {PRIME_RL_COMMIT}", "v1": f"--commit {V1_COMMIT}"}
    for config in ctx.configs:
        if config.generation != generation:
            twin = Path(CONFIG_FOLDERS[generation]) / config.path.name
            yield CheckRow(
                "prime-rl",
                "fail",
                f"{config.path} is a {other} config (prime-rl {how[other].split()[-1]}), but {root} is {generation} "
                f"prime-rl: it would reject the file",
                f"use {twin}, or install the other one: bash scripts/install_prime_rl.sh {how[other]} DIR",
            )
