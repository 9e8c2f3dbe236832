"""GPU inventory and layout check against a fake nvidia-smi (no GPU here) and real processes.

Only nvidia-smi is faked: a small executable in tmp_path that prints the CSV a driver would print.
The PIDs it reports are real processes spawned by the test (or one known to be gone), so the
psutil user/command lookup runs for real.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import psutil
import pytest

from air.launch.gpus import (
    Gpu,
    GpuInventory,
    GpuProcess,
    GpuQueryError,
    GpuRole,
    check_gpus,
    check_layout,
    describe_inventory,
    query_gpus,
)
from rigs.patience import backstop

UUIDS = [
    "GPU-3b0c5c8e-8f4a-2d1e-6c1b-0e4f6a9d7c21",
    "GPU-9d2e1a7f-4c3b-11a8-b0d5-6f7e8a9b0c12",
    "GPU-c41f0e2d-7a6b-5e8c-9d0a-1b2c3d4e5f60",
    "GPU-58e7d6c5-b4a3-9281-7f6e-5d4c3b2a1908",
]
DRIVER = "550.54.15"
TOTAL = 81559  # MiB, what an H100 80GB HBM3 reports


def gpu_csv(used: list[int]) -> str:
    """`nvidia-smi --query-gpu=index,uuid,name,memory.total,memory.used,driver_version` output."""
    return "".join(f"{i}, {UUIDS[i]}, NVIDIA H100 80GB HBM3, {TOTAL}, {u}, {DRIVER}\n" for i, u in enumerate(used))


FakeSmi = Callable[..., str]


@pytest.fixture
def fake_smi(tmp_path: Path) -> FakeSmi:
    """Write a fake nvidia-smi answering the two queries; returns its path.

    It exits 2 on any other arguments, so a test also fails if the module asks for a different format.
    """

    def make(gpus: str = "", apps: str = "", *, fail: str | None = None, hang: bool = False) -> str:
        path = tmp_path / "nvidia-smi"
        if hang:
            # Stuck like nvidia-smi in a hung driver, with a child that holds its output pipe open.
            path.write_text(f"#!/bin/sh\nsleep 60 &\necho $$ $! > {tmp_path / 'smi.pids'}\nwait\necho late\n")
        else:
            path.write_text(
                textwrap.dedent(
                    f"""\
                    #!{sys.executable}
                    import sys
                    gpus, apps, fail = {gpus!r}, {apps!r}, {fail!r}
                    args = sys.argv[1:]
                    if fail is not None:
                        print(fail)  # the real nvidia-smi prints its failure on stdout
                        sys.exit(9)
                    if len(args) != 2 or args[1] != "--format=csv,noheader,nounits":
                        sys.exit("fake nvidia-smi: unexpected arguments " + repr(args))
                    if args[0] == "--query-gpu=index,uuid,name,memory.total,memory.used,driver_version":
                        sys.stdout.write(gpus)
                    elif args[0] == "--query-compute-apps=gpu_uuid,pid,used_memory":
                        sys.stdout.write(apps)
                    else:
                        sys.exit("fake nvidia-smi: unknown query " + repr(args[0]))
                    """
                )
            )
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        return str(path)

    return make


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A real process to stand in for one holding GPU memory."""
    proc = subprocess.Popen(["sleep", "30"])
    yield proc
    proc.kill()
    proc.wait()


@pytest.fixture
def gone_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    assert not psutil.pid_exists(proc.pid)
    return proc.pid


def me() -> str:
    return psutil.Process().username()


# --- query_gpus ---------------------------------------------------------------------------------


def test_parses_gpus_and_processes_with_owner(fake_smi: FakeSmi, sleeper, gone_pid: int) -> None:
    apps = f"{UUIDS[1]}, {sleeper.pid}, 72990\n{UUIDS[3]},   {gone_pid} ,  [N/A]\n"
    inv = query_gpus(fake_smi(gpu_csv([1, 73000, 0, 512]), apps))

    assert inv is not None
    assert [g.index for g in inv.gpus] == [0, 1, 2, 3]
    assert inv.gpus[1] == Gpu(1, UUIDS[1], "NVIDIA H100 80GB HBM3", TOTAL, 73000)
    assert inv.gpus[1].memory_free_mib == TOTAL - 73000
    assert inv.driver_version == DRIVER
    assert inv.processes_on(1) == [GpuProcess(1, sleeper.pid, 72990, me(), "sleep 30")]
    # Gone (or in another PID namespace): the pid stays, owner unknown; [N/A] memory is None.
    assert inv.processes_on(3) == [GpuProcess(3, gone_pid, None, None, None)]
    assert inv.processes_on(0) == []


def test_not_supported_memory_and_no_processes(fake_smi: FakeSmi, sleeper) -> None:
    inv = query_gpus(fake_smi(gpu_csv([0]), f"{UUIDS[0]}, {sleeper.pid}, [Not Supported]\n"))
    assert inv is not None and inv.processes[0].used_memory_mib is None

    empty = query_gpus(fake_smi(gpu_csv([0, 0]), ""))
    assert empty is not None and empty.processes == [] and len(empty.gpus) == 2


def test_missing_nvidia_smi_means_no_driver(tmp_path: Path) -> None:
    assert query_gpus(str(tmp_path / "nvidia-smi")) is None
    assert query_gpus("air-test-no-such-nvidia-smi") is None
    assert describe_inventory(None) == "no NVIDIA driver/GPU on this machine"


def test_default_lookup_uses_path(fake_smi: FakeSmi, monkeypatch: pytest.MonkeyPatch) -> None:
    exe = fake_smi(gpu_csv([0]))
    monkeypatch.setenv("PATH", f"{Path(exe).parent}{os.pathsep}{os.environ['PATH']}")
    inv = query_gpus()
    assert inv is not None and len(inv.gpus) == 1


def test_failing_nvidia_smi_raises_with_its_message(fake_smi: FakeSmi) -> None:
    said = (
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
        "Make sure that the latest NVIDIA driver is installed and running."
    )
    with pytest.raises(GpuQueryError, match="couldn't communicate with the NVIDIA driver") as caught:
        query_gpus(fake_smi(fail=said))
    assert "exited with 9" in str(caught.value)


def test_hanging_nvidia_smi_times_out_and_is_stopped(fake_smi: FakeSmi, tmp_path: Path) -> None:
    with pytest.raises(GpuQueryError, match="did not answer"):
        query_gpus(fake_smi(hang=True), timeout=0.5)
    procs = []
    for pid in map(int, (tmp_path / "smi.pids").read_text().split()):  # the script and its child
        try:
            procs.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            pass
    # SIGKILL is delivered asynchronously: give the kernel a moment, then nothing may be left running.
    _, alive = psutil.wait_procs(procs, timeout=backstop(5))
    assert [p for p in alive if p.status() != psutil.STATUS_ZOMBIE] == []


def test_unreadable_output_names_the_line(fake_smi: FakeSmi) -> None:
    with pytest.raises(GpuQueryError, match="GPU-x, NVIDIA H100 80GB HBM3, 81559, seven"):
        query_gpus(fake_smi("0, GPU-x, NVIDIA H100 80GB HBM3, 81559, seven, 550.54.15\n"))


def test_describe_inventory(fake_smi: FakeSmi) -> None:
    inv = query_gpus(fake_smi(gpu_csv([0, 0, 0, 0])))
    assert describe_inventory(inv) == f"4 × NVIDIA H100 80GB HBM3, driver {DRIVER}"


# --- check_layout -------------------------------------------------------------------------------


def inventory(used: list[int], processes: Sequence[GpuProcess] = ()) -> GpuInventory:
    gpus = [Gpu(i, UUIDS[i], "NVIDIA H100 80GB HBM3", TOTAL, u) for i, u in enumerate(used)]
    return GpuInventory(gpus=gpus, processes=list(processes))


def test_missing_index_fails_naming_it() -> None:
    findings = check_layout([GpuRole("trainer", (2, 7), "trainer_gpu_ids")], inventory([0, 0, 0, 0]))
    assert len(findings) == 1
    assert findings[0].status == "fail"
    assert findings[0].message == "trainer wants GPU 7 but this machine has GPUs 0-3"
    assert "trainer_gpu_ids" in findings[0].fix
    lone = check_layout([GpuRole("inference", (1,))], inventory([0]))
    assert lone[0].message == "inference wants GPU 1 but this machine has GPU 0"


def test_busy_gpu_fails_for_trainer_and_lists_holder(fake_smi: FakeSmi, sleeper) -> None:
    inv = query_gpus(fake_smi(gpu_csv([1, 73000]), f"{UUIDS[1]}, {sleeper.pid}, 72990\n"))
    assert inv is not None
    findings = check_layout([GpuRole("inference", (0,)), GpuRole("trainer", (1,))], inv)

    assert [f.status for f in findings] == ["pass", "fail"]
    busy = findings[1]
    assert "GPU 1 (H100 80GB HBM3)" in busy.message
    assert f"pid {sleeper.pid} ({me()}: sleep 30, 71.3 GiB)" in busy.message
    assert f"kill {sleeper.pid}" in busy.fix  # it is ours: the user may stop it


def test_busy_gpu_only_warns_for_env_role(fake_smi: FakeSmi, sleeper) -> None:
    inv = query_gpus(fake_smi(gpu_csv([0, 4096]), f"{UUIDS[1]}, {sleeper.pid}, 4000\n"))
    assert inv is not None
    findings = check_layout([GpuRole("env mlgym-titanic", (1,))], inv)
    assert [f.status for f in findings] == ["warn"]
    assert f"pid {sleeper.pid}" in findings[0].message


def test_other_users_process_is_never_ours_to_kill() -> None:
    holder = GpuProcess(2, 4242, 72990, "alice", "python -m vllm.entrypoints.openai.api_server --model Qwen/Qwen3-8B")
    findings = check_layout([GpuRole("trainer", (2,))], inventory([0, 0, 73000], [holder]))
    assert findings[0].status == "fail"
    message = findings[0].message
    assert "pid 4242 (alice: python -m vllm.entrypoints.openai.api_server --model Qwen..., 71.3 GiB)" in message
    assert findings[0].fix == "ask its owner or wait; air never kills other users' processes"


def test_own_pids_are_labelled_for_air_clean(fake_smi: FakeSmi, sleeper) -> None:
    inv = query_gpus(fake_smi(gpu_csv([73000]), f"{UUIDS[0]}, {sleeper.pid}, 72990\n"))
    assert inv is not None
    findings = check_layout([GpuRole("inference", (0,))], inv, own_pids={sleeper.pid})
    assert f"pid {sleeper.pid}" in findings[0].message
    assert "recorded by air (run `air clean` to stop it)" in findings[0].message
    assert "air clean" in findings[0].fix


def test_memory_used_without_visible_process_fails() -> None:
    findings = check_layout([GpuRole("trainer", (0,))], inventory([40000]))
    assert findings[0].status == "fail"
    assert "no process visible" in findings[0].message


def test_all_free_passes_once_per_role() -> None:
    roles = [GpuRole("inference", (0,)), GpuRole("trainer", (1, 2, 3))]
    findings = check_layout(roles, inventory([1, 1, 1, 2048]))
    assert [f.status for f in findings] == ["pass", "pass"]
    assert findings[0].message == "inference: GPU 0 free (79.6 of 79.6 GiB)"
    assert findings[1].message.startswith("trainer: GPUs 1-3 free")


def test_min_free_fraction_is_the_threshold() -> None:
    inv = inventory([TOTAL // 4])  # a quarter used
    assert check_layout([GpuRole("trainer", (0,))], inv)[0].status == "fail"
    assert check_layout([GpuRole("trainer", (0,))], inv, min_free_fraction=0.5)[0].status == "pass"


def test_check_gpus_reports_driver_problems(fake_smi: FakeSmi, tmp_path: Path) -> None:
    roles = [GpuRole("trainer", (0,))]
    missing = check_gpus(roles, nvidia_smi=str(tmp_path / "absent"))
    assert missing[0].status == "fail" and "no NVIDIA driver" in missing[0].message
    broken = check_gpus(roles, nvidia_smi=fake_smi(fail="NVIDIA-SMI has failed"))
    assert broken[0].status == "fail" and "NVIDIA-SMI has failed" in broken[0].message
    fine = check_gpus(roles, nvidia_smi=fake_smi(gpu_csv([0])))
    assert [f.status for f in fine] == ["pass"]
