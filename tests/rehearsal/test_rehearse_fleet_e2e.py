"""Opt-in (AIR_TEST_PRIME_RL_V1_DIR, as test_rehearse_v1_e2e.py): ``air rehearse`` with today's prime-rl
orchestrator against two env nodes under a real Slurm cluster on this host (scripts/slurm_cluster.sh, each
node its own Docker engine), the nodes started by ``air fleet submit`` in prime-rl's venv. Mid-run n2's job
step is cancelled and its engine stopped: its episodes fail within the bound, the rehearsal completes its
steps, no batch holds an episode of n2 that finished between the loss and its return, the job's loop starts
n2 again once its engine is back, and after the jobs end no container is left on either engine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from air.fleet.probe import answers
from air.launch.prime_rl import cpu_venv
from air.rehearsal.launch import entry_env
from rigs.fleet import containers, figures, make_folder, remove_private, wait_for
from rigs.patience import backstop
from tests.conftest import unavailable
from tests.fleet.conftest import new_slurm_cluster  # noqa: F401 (a fixture)
from tests.opt_in import prime_rl_v1_checkout
from tests.rehearsal.test_rehearse_v1_e2e import CONFIG, SOURCE

ROOT = Path(__file__).resolve().parents[2]
LOST_AFTER = 4.0
BOUND = LOST_AFTER + 2 * 1.0


def _saboteur(cluster, job: str, folder, when: dict, stop: threading.Event) -> None:
    keys = (folder.key_pair("client"), folder.key_pair("node").public)
    """Once n2 has finished an episode and runs another: cancel its step, stop its engine; start the engine
    again once the spreader has lost it (the job's loop then starts n2 again, which must answer)."""
    nodes = lambda: figures(folder, "lane").get("nodes", {})  # noqa: E731
    while not stop.is_set():
        n2 = nodes().get("n2", {})
        if n2.get("done", 0) >= 1 and n2.get("running", 0) >= 1:
            break
        time.sleep(0.2)
    else:
        return
    killed_start = folder.records()["n2"].incarnation
    cluster.run("scancel", cluster.env_node_steps(job)["n2"])
    cluster.engine("stop", "n2")
    when["killed"] = time.time()
    wait_for(lambda: nodes()["n2"]["state"] == "lost", backstop(60), "n2 lost")
    when["lost"] = time.time()
    time.sleep(5)
    cluster.engine("start", "n2")
    # Back: the job's loop started n2 again and it answers with the run's key (the rehearsal's spreader may
    # have stopped by then, its steps done: it is not asked).
    record = wait_for(
        lambda: (r := folder.records().get("n2")) and r.incarnation != killed_start and r, backstop(180), "n2 again"
    )
    wait_for(lambda: answers(record.address, keys), backstop(60), "n2 to answer")
    when["back"] = time.time()


@pytest.mark.timeout(2400)
def test_rehearse_over_two_slurm_env_nodes_survives_losing_one(
    new_slurm_cluster,  # noqa: F811
    tmp_path: Path,
    docker_image: str,
    tiny_model_dir: Path,
) -> None:
    checkout = prime_rl_v1_checkout()
    if checkout is None:
        unavailable(
            "the fleet rehearsal",
            "no v1 prime-rl: set AIR_TEST_PRIME_RL_V1_DIR (install_prime_rl.sh --orchestrator-only --commit)",
        )
    cluster = new_slurm_cluster(nodes=2, images=(docker_image,))
    run_id = f"fleete2e-{os.getpid()}"
    config = tmp_path / "rl.toml"
    config.write_text(CONFIG + SOURCE.format(name="lane", task="laneMerge", image=docker_image, run_id=run_id))
    taskset = {
        "id": "air_mlgym", "task_root": "builtin", "task_configs": ["laneMerge"], "max_turns": 4,
        "image": docker_image, "run_id": run_id, "pool_size": 2, "trajectory_dir": str(tmp_path / "trajectories"),
    }  # fmt: skip
    folder = make_folder(tmp_path / "fleet", {"taskset": taskset, "player": {"harness": {"id": "air_mlgym"}}})
    python = cpu_venv(checkout) / "bin" / "python"  # nodes speak the orchestrator's verifiers
    env = {**entry_env(), **cluster.env, "PYTHONPATH": str(ROOT)}
    submit = [str(python), "-m", "air.cli.main", "fleet", "submit", str(folder.root), "--nodes", "2",
              "--restart-delay", "2", "--node-args", "--host 127.0.0.1 --bind 127.0.0.1"]  # fmt: skip
    done = subprocess.run(submit, env=env, capture_output=True, text=True, timeout=backstop(120), cwd=ROOT)
    assert done.returncode == 0, done.stderr
    job = done.stdout.strip().rsplit(" ", 1)[-1]
    when: dict[str, float] = {}
    stop = threading.Event()
    saboteur = threading.Thread(target=_saboteur, args=(cluster, job, folder, when, stop), daemon=True)
    out = tmp_path / "rehearsal"
    try:
        wait_for(lambda: len(folder.records()) == 2, backstop(300), "both env nodes recorded")
        saboteur.start()
        command = [sys.executable, "-m", "air.cli.main", "rehearse", "--config", str(config), "--steps", "3",
                   "--prime-rl", str(checkout), "--output", str(out), "--model", str(tiny_model_dir),
                   "--env-nodes", f"lane={folder.root}", "--node-lost-after", str(LOST_AFTER), "--json"]  # fmt: skip
        rehearsal = subprocess.run(command, capture_output=True, text=True, timeout=1800, cwd=ROOT,
                                   env={k: v for k, v in os.environ.items() if not k.startswith("SLURM")})  # fmt: skip
        saboteur.join(timeout=backstop(300))
    finally:
        stop.set()
        cluster.run("scancel", job, check=False)
        wait_for(lambda: not cluster.run("squeue", "-h", check=False).stdout.strip(), backstop(180), "the job to end")
        remove_private(folder)
    assert rehearsal.stdout.strip(), rehearsal.stderr[-3000:]
    report = json.loads(rehearsal.stdout.strip().splitlines()[-1])
    assert report["steps_completed"] == 3, rehearsal.stderr[-3000:]
    assert "killed" in when and "back" in when, f"the node was never lost and regained: {when}"
    (server,) = report["env_servers"]
    nodes = server["env_nodes"]
    assert nodes["n2"]["losses"] >= 1 and nodes["n2"]["failed"] >= 1 and nodes["n1"]["done"] >= 1, nodes
    assert when["lost"] - when["killed"] < BOUND + 3, when
    by_node: dict[str, int] = {}
    for path in (out / "run" / "rollouts").glob("step_*/train/all/traces.jsonl"):
        for line in path.read_text().splitlines():
            for trace in json.loads(line)["traces"]:
                node, ended = trace["info"]["env_node"], trace["info"]["ended_at"]
                by_node[node] = by_node.get(node, 0) + 1
                assert not (node == "n2" and when["killed"] < ended < when["back"]), "a lost node's episode trained"
    assert by_node.get("n1", 0) > 0, by_node
    for node in cluster.nodes:
        assert containers(cluster.engine_address(node), f"{run_id}-{node}") == [], f"containers left on {node}"
