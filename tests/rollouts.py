"""Rollouts through air_mlgym's real path, shared by the env, red-team, replay and checkout tests: the
real openai client over HTTP to a scripted policy server on loopback, real containers."""

from __future__ import annotations

import os
from pathlib import Path

from openai import AsyncOpenAI

import air_mlgym
from air.env.trajectory_reader import iter_trajectory_paths, load_trajectory
from air.serving.server import PolicyServer


def make_env(tmp_path: Path, docker_image: str, **kwargs):
    """The env on the built-in tasks with small containers and no pool; ``kwargs`` override."""
    args = dict(
        task_configs=["laneMerge", "loanDefault"],
        image=docker_image,
        trajectory_dir=str(tmp_path / "trajectories"),
        container_cpus=1.0,
        container_memory="1g",
        container_tmp="512m",  # with /dev/shm, what fits a 1g container (SandboxConfig's memory budget)
        pool_size=0,
        run_id=f"pytest-env-{os.getpid()}",
    )
    args.update(kwargs)
    return air_mlgym.load_environment(**args)


async def run_group(env, policy, task: str, n: int = 1):
    """``n`` rollouts of ``task`` played by ``policy``, as verifiers' run_group returns them."""
    row = next(r for r in env.get_dataset().to_list() if r["task"] == task)
    with PolicyServer(policy) as server:
        client = AsyncOpenAI(base_url=server.base_url, api_key="test", max_retries=0)
        try:
            outputs = await env.run_group([row] * n, client, server.model_name, {"temperature": 1.0})
        finally:
            await client.close()
    return [dict(o) for o in outputs]


def trajectories(tmp_path: Path):
    return [load_trajectory(p) for p in iter_trajectory_paths(tmp_path / "trajectories")]
