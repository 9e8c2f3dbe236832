"""The fleet under a real Slurm cluster on this host (scripts/slurm_cluster.sh: munge, slurmctld, a slurmd
and a Docker engine per node). `air fleet submit` starts an env node per Slurm node as its own job step;
the spreader starts as `air fleet overlay`'s pre_run_command starts it in prime-rl's job (a step on the
orchestrator's node); verifiers' EnvClient asks for episodes as the orchestrator does. Mid-episode n2's
step is cancelled and its engine stopped: its episodes fail within the bound, n1's finish; with the engine
back, the job's loop starts n2 again, which removes what the old step left and rejoins. When the jobs are
cancelled nothing is left on either engine."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from air.fleet.overlay import spreader_command
from air.serving.server import PolicyServer
from rigs.fleet import containers, figures, free_port, make_folder, outcomes, remove_private, wait_for
from rigs.patience import backstop
from tests.fleet.conftest import SlurmCluster, new_slurm_cluster  # noqa: F401 (a fixture)

vf = pytest.importorskip("verifiers.v1")
from verifiers.v1.configs.client import EvalClientConfig  # noqa: E402
from verifiers.v1.serve import EnvClient  # noqa: E402
from verifiers.v1.utils import loaders  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
LOST_AFTER, PROBE = 4.0, 0.5
BOUND = LOST_AFTER + 2 * PROBE


def _submit_spreader(cluster: SlurmCluster, folder, port: int, out: Path) -> str:
    """A one-node job on n1 that runs the overlay's pre_run_command, as prime-rl's job would, and waits."""
    line = spreader_command(folder, "train", port, delay_s=1,
                            options=("--lost-after", str(LOST_AFTER), "--probe-interval", str(PROBE)))  # fmt: skip
    script = out / "orchestrator-node.sbatch"
    header = "#!/bin/bash\n#SBATCH --nodes=1\n#SBATCH --nodelist=n1\n"
    header += f"#SBATCH --output={out / 'orchestrator-node.out'}\n"
    script.write_text(f"{header}export ORCH_ADDR=n1\n{line}\nwait\n")
    return cluster.run("sbatch", "--parsable", str(script)).stdout.strip().split(";")[0]


@pytest.mark.docker
@pytest.mark.timeout(900)
def test_env_nodes_as_slurm_steps_lose_and_regain_a_node(docker_image: str, new_slurm_cluster, tmp_path: Path) -> None:  # noqa: F811
    cluster = new_slurm_cluster(nodes=2, images=(docker_image,))
    run_id = f"pytest-slurm-{os.getpid()}-{tmp_path.name}"
    taskset = {
        "id": "air_mlgym", "task_configs": ["laneMerge"], "max_turns": 6, "image": docker_image, "run_id": run_id,
        "pool_size": 2, "engine_wait": 20, "trajectory_dir": str(tmp_path / "trajectories"),
    }  # fmt: skip
    folder = make_folder(tmp_path / "fleet", {"taskset": taskset})
    script = tmp_path / "script.json"
    script.write_text(json.dumps(["sleep 5", "validate", "submit"]))
    port = free_port()
    env = {**cluster.env, "PYTHONPATH": str(ROOT), "AIR_TEST_KEY": "x"}
    submit = [sys.executable, "-m", "air.cli.main", "fleet", "submit", str(folder.root), "--nodes", "2",
              "--restart-delay", "2", "--node-args", "--host 127.0.0.1 --bind 127.0.0.1"]  # fmt: skip
    done = subprocess.run(submit, env=env, capture_output=True, text=True, timeout=backstop(60), cwd=ROOT)
    assert done.returncode == 0, done.stderr
    job = done.stdout.strip().rsplit(" ", 1)[-1]
    spreader_job = _submit_spreader(cluster, folder, port, tmp_path)
    nodes = lambda: figures(folder).get("nodes", {})  # noqa: E731
    tasks = list(loaders.load_taskset(loaders.taskset_config_type("air_mlgym")(**taskset)))
    try:
        wait_for(
            lambda: len(nodes()) == 2 and all(n["state"] == "up" for n in nodes().values()),
            backstop(240),
            "both env nodes",
        )
        assert set(cluster.env_node_steps(job)) == {"n1", "n2"}, "one job step per node"
        with PolicyServer(f"script:{script}") as server:
            client_config = EvalClientConfig(base_url=server.base_url, api_key_var="AIR_TEST_KEY")

            async def episode(client: EnvClient, index: int):
                task_data = tasks[index % len(tasks)].data.model_dump(mode="json")
                return await client.run(client_config, "scripted", vf.SamplingConfig(), task_data)

            async def play():
                client = EnvClient(f"tcp://127.0.0.1:{port}")
                try:
                    await client.wait_for_server_startup(timeout=60)
                    warm = await asyncio.gather(*(episode(client, i) for i in range(4)))
                    running = [asyncio.create_task(episode(client, i)) for i in range(4)]
                    while not all(node["running"] >= 1 for node in nodes().values()):
                        await asyncio.sleep(0.1)
                    await asyncio.sleep(2.0)
                    old = folder.records()["n2"].incarnation
                    cluster.run("scancel", cluster.env_node_steps(job)["n2"])  # n2's step only
                    await asyncio.to_thread(cluster.engine, "stop", "n2")
                    killed = time.monotonic()
                    ended = await outcomes(running, killed)
                    await asyncio.to_thread(cluster.engine, "start", "n2")
                    while (folder.records().get("n2") is None or folder.records()["n2"].incarnation == old
                           or nodes()["n2"]["state"] != "up"):  # fmt: skip
                        await asyncio.sleep(0.2)
                    after = await asyncio.gather(*(episode(client, i) for i in range(4)))
                    return warm, ended, after
                finally:
                    await client.close()

            warm, ended, after = asyncio.run(play())
    finally:
        cluster.run("scancel", job, spreader_job, check=False)
        wait_for(lambda: not cluster.run("squeue", "-h", check=False).stdout.strip(), backstop(120), "the jobs to end")
        remove_private(folder)
    node_of = lambda episode: episode.traces[0].info["env_node"]  # noqa: E731
    assert {node_of(e) for e in warm} == {"n1", "n2"} and all(e.ok for e in warm)
    failed = [(what, seconds) for kind, what, seconds in ended if kind == "failed"]
    assert failed and all("env node n2 lost" in what for what, _ in failed), ended
    assert max(seconds for _, seconds in failed) < BOUND + 3, f"n2's episodes failed {failed}"
    assert all(node_of(e) == "n1" and e.ok for kind, e, _ in ended if kind == "ok")
    assert {node_of(e) for e in after} == {"n1", "n2"}, "n2 rejoined after its step started again"
    for node in cluster.nodes:
        assert containers(cluster.engine_address(node), f"{run_id}-{node}") == [], f"containers left on {node}"
    logs = (folder.root / "logs").rglob("*")
    assert any("removed" in path.read_text(errors="replace") for path in logs if path.is_file()), "n2 reaped"
