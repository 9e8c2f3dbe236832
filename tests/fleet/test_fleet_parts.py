"""The fleet's parts without processes: the wire's framing, the choice of node, the settings' checks, the
Slurm script, the overlay for prime-rl and the env read off a config."""

from __future__ import annotations

import tomllib
from pathlib import Path

import msgpack
import pytest
import zmq
from pydantic import ValidationError

from air.fleet import wire
from air.fleet.errors import FleetError
from air.fleet.folder import FleetFolder, NodeRecord
from air.fleet.links import Link, NodeState, Request, least_busy
from air.fleet.overlay import spreader_command, write_overlay
from air.fleet.settings import SpreadSettings
from air.fleet.slurm import SlurmJob, render
from air.fleet.source_env import source_env

ROOT = Path(__file__).resolve().parents[2]
V1_CONFIG = ROOT / "configs" / "mlgym-v1" / "rl.toml"


def test_a_failure_is_framed_as_the_clients_generation_expects() -> None:
    two, three = wire.failure(wire.Wire.TWO_FRAMES, "gone"), wire.failure(wire.Wire.THREE_FRAMES, "gone")
    assert len(two) == 1 and three[0] == b"reply" and len(three) == 2
    assert msgpack.unpackb(two[0]) == msgpack.unpackb(three[1]) == {"success": False, "error": "gone"}
    assert wire.wire_of([b"data"]) is wire.Wire.TWO_FRAMES and wire.wire_of([b"reply", b"d"]) is wire.Wire.THREE_FRAMES


def test_only_a_delta_leaves_its_request_open() -> None:
    assert not wire.is_final([b"delta", b"x"]) and not wire.is_final([zmq.Frame(b"delta"), zmq.Frame(b"x")])
    assert wire.is_final([b"reply", b"x"]) and wire.is_final([b"x"])


def test_success_is_read_without_the_episode() -> None:
    big = msgpack.packb({"success": True, "error": None, "episode": {"tokens": list(range(10_000))}})
    assert wire.succeeded(big) and not wire.succeeded(msgpack.packb({"success": False, "error": "x"}))
    assert not wire.succeeded(b"\x00not msgpack")
    assert wire.cancel_target(msgpack.packb({"request_id": "abc"})) == b"abc" and wire.cancel_target(b"\xc1") == b""


def _link(name: str, capacity: int, running: int, state: NodeState = NodeState.UP) -> Link:
    record = NodeRecord(name=name, address="tcp://x:1", incarnation="i", host="h", pid=1, capacity=capacity)
    link = Link(record=record, socket=None, state=state)  # type: ignore[arg-type]
    for index in range(running):
        link.in_flight[str(index).encode()] = Request(b"c", str(index).encode(), wire.RUN, b"")
    link.running = running
    return link


def test_the_least_busy_node_by_share_of_its_capacity() -> None:
    big, small = _link("big", 8, 3), _link("small", 2, 1)
    assert least_busy([big, small], None) is big  # 3/8 < 1/2
    assert least_busy([_link("full", 2, 2), _link("lost", 4, 0, NodeState.LOST)], None) is None
    assert least_busy([big, small], 3) is small, "the spreader's cap bounds a node below what it says"


def test_a_node_is_not_lost_to_one_late_probe() -> None:
    with pytest.raises(ValidationError, match="at least twice probe_interval_s"):
        SpreadSettings(probe_interval_s=5, lost_after_s=6)
    with pytest.raises(ValidationError):
        SpreadSettings(probe_interval_s=0)


def test_the_slurm_job_runs_a_step_per_node_and_starts_an_ended_one_again(tmp_path: Path) -> None:
    script = render(
        FleetFolder(tmp_path / "f"), SlurmJob(nodes=4, partition="cpu", gpus_per_node=1, node_args=["--capacity", "8"])
    )
    assert "#SBATCH --nodes=4" in script and "#SBATCH --partition=cpu" in script and "--gpus-per-node=1" in script
    assert 'for node in $(scontrol show hostnames "$SLURM_JOB_NODELIST")' in script
    assert '--nodelist="$node"' in script and "--gpus=1" in script and "while true" in script
    assert "fleet node" in script and "--capacity 8" in script


def test_the_overlay_sets_the_sources_address_keeps_the_others_and_starts_the_spreader(tmp_path: Path) -> None:
    folder = FleetFolder(tmp_path / "fleet")
    path = write_overlay(folder, V1_CONFIG, "mlgym-fmnist", 5951)
    overlay = tomllib.loads(path.read_text())
    original = tomllib.loads(V1_CONFIG.read_text())["orchestrator"]["train"]["source"]
    sources = overlay["orchestrator"]["train"]["source"]
    assert [s["name"] for s in sources] == [s["name"] for s in original], "a TOML array replaces: all are kept"
    assert [s.get("serve", {}).get("address") for s in sources if s["name"] == "mlgym-fmnist"] == [
        "tcp://127.0.0.1:5951"
    ]
    assert all("serve" not in s for s in sources if s["name"] != "mlgym-fmnist")
    command = overlay["slurm"]["pre_run_command"]
    assert "srun --overlap" in command and "${ORCH_ADDR:-$SLURMD_NODENAME}" in command and "fleet spread" in command
    assert command.endswith("&"), "in the background: the job goes on to start prime-rl"
    with pytest.raises(FleetError, match="no train source 'mlgym-fmnst'.*mlgym-fmnist"):
        write_overlay(folder, V1_CONFIG, "mlgym-fmnst", 5951)


def test_the_overlay_refuses_a_path_prime_rls_cleanup_would_kill(tmp_path: Path) -> None:
    with pytest.raises(FleetError, match="prime_rl.*kills by name"):
        spreader_command(FleetFolder(tmp_path / "prime_rl" / "fleet"), "train", 5950)


def test_the_env_of_a_named_source_and_the_errors_that_name_the_fix() -> None:
    env = source_env(V1_CONFIG, "mlgym-titanic")
    assert env["taskset"]["id"] == "air_mlgym" and env["taskset"]["task_configs"] == ["titanic"]
    with pytest.raises(FleetError, match="sources .*name one with --source"):
        source_env(V1_CONFIG)
    with pytest.raises(FleetError, match="prime-rl c87c19b"):
        source_env(ROOT / "configs" / "mlgym" / "rl.toml")


def test_slurms_gpus_win_over_cuda_visible_devices_and_the_configs_env_gpu(tmp_path: Path, monkeypatch) -> None:
    from air.fleet.node import NodeOptions, node_env

    folder = FleetFolder(tmp_path / "fleet")
    folder.create({"taskset": {"id": "air_mlgym", "env_gpu": "7", "run_id": "rl"}})
    for variable in ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(variable, raising=False)
    env, run_id, capacity, gpus = node_env(NodeOptions(folder=folder, name="n3"))
    assert env["taskset"]["env_gpu"] == "7" and gpus == [] and run_id == "rl-n3" and capacity == 4
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # renumbered under Slurm's device constraint
    monkeypatch.setenv("SLURM_STEP_GPUS", "2,3")  # the host's ids, which Docker takes
    env, _, _, gpus = node_env(NodeOptions(folder=folder, name="n3"))
    assert gpus == ["2", "3"] and env["taskset"]["env_gpu"] == "2,3"


def test_every_node_of_a_fleet_reads_the_folders_one_evaluation_secret(tmp_path: Path) -> None:
    """Issue 50: the nodes of one run draw a group's dice alike, from a secret only the fleet's owner reads."""
    from air.fleet.node import NodeOptions, node_env

    folder = FleetFolder(tmp_path / "fleet")
    folder.create({"taskset": {"id": "air_mlgym"}})
    secret = folder.evaluation_secret.read_text()
    assert len(bytes.fromhex(secret.strip())) == 32 and folder.evaluation_secret.stat().st_mode & 0o077 == 0
    paths = {node_env(NodeOptions(folder=folder, name=n))[0]["taskset"]["evaluation_secret_file"] for n in ("a", "b")}
    assert paths == {str(folder.evaluation_secret)}
    folder.create({"taskset": {"id": "air_mlgym"}})  # init again: the running nodes' secret is kept
    assert folder.evaluation_secret.read_text() == secret
    folder.evaluation_secret.unlink()
    with pytest.raises(FleetError, match="evaluation.secret is missing: run `air fleet init DIR --config rl.toml`"):
        node_env(NodeOptions(folder=folder, name="a"))


def test_the_fleet_folder_is_the_users_own(tmp_path: Path) -> None:
    folder = FleetFolder(tmp_path / "fleet")
    folder.create({"taskset": {"id": "stub"}})
    assert folder.root.stat().st_mode & 0o077 == 0


def test_a_node_name_is_checked_and_a_live_namesake_refused(tmp_path: Path) -> None:
    from air.fleet.node import NodeOptions, check_unique, private_folder, serve_node
    from rigs.fleet import fleet

    with fleet(tmp_path, 1) as (folder, _processes, _address):
        keys = (folder.key_pair("client"), folder.key_pair("node").public)
        with pytest.raises(FleetError, match="an env node named 'n1' already answers at tcp://127.0.0.1"):
            check_unique(folder, "n1", keys)
        with pytest.raises(FleetError, match="letters, digits"):
            serve_node(NodeOptions(folder=folder, name="../n2", docker=False))
        check_unique(folder, "n2", keys)  # a name nobody holds
    left = private_folder(folder, "n9")
    (left / "env.sock").write_text("")  # as a SIGKILLed start leaves it
    again = private_folder(folder, "n9")
    assert again == left and list(again.iterdir()) == [] and again.stat().st_mode & 0o077 == 0
    again.rmdir()
