"""Where the time of 32 concurrent rollouts goes (the rollouts of ``benchmarks/env.py``'s rollouts_per_min_32).

    uv run python benchmarks/rollout_profile.py [--json] [--rollouts 32] [--policy improve]

Two views of one run of ``--rollouts`` laneMerge rollouts at once through verifiers' rollout path:
- wall: the summed wall time of each phase over all rollouts (container start, workspace set-up, the agent's
  commands, evaluations, container removal, and the model's replies), and the run's elapsed time;
- cpu: the CPU seconds the machine spent during the run (/proc/stat), split into this process, the
  containers (their cgroups' counters, sampled every 0.1 s), the Docker engine's own processes (dockerd,
  containerd, shims, sampled) and the rest (runc while it sets a container or exec up, the kernel, others).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from air.sandbox.container import Sandbox  # noqa: E402
from air.sandbox.pool import SandboxPool  # noqa: E402
from air.serving.server import PolicyServer  # noqa: E402
from air.tasks.workspace import TaskWorkspace  # noqa: E402
from benchmarks.env import concurrent_rollouts  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")
ENGINE = ("dockerd", "containerd", "containerd-shim", "containerd-shim-runc-v2", "docker-proxy")
CGROUPS = (Path("/sys/fs/cgroup/cpuacct/docker"), Path("/sys/fs/cgroup/system.slice"))  # cgroup v1, v2

wall: dict[str, list[float]] = defaultdict(list)
in_container: dict[str, list[float]] = defaultdict(list)  # the container's CPU during the phase


def _counter(path: Path) -> float | None:
    """CPU seconds in a cgroup's counter file (v1 ``cpuacct.usage`` in ns, v2 ``cpu.stat`` in us), or None."""
    try:
        text = path.read_text()
    except OSError:
        return None
    return int(text) / 1e9 if path.name == "cpuacct.usage" else int(text.split()[1]) / 1e6


def counter_files(container_id: str = "*") -> list[Path]:
    """The cgroup CPU counter of a container (or, with the default, of every container) that exists."""
    v1, v2 = CGROUPS
    return [*v1.glob(f"{container_id}/cpuacct.usage"), *v2.glob(f"docker-{container_id}.scope/cpu.stat")]


def container_cpu(container_id: str) -> float | None:
    """A container's CPU seconds so far (its cgroup's counter), None where it cannot be read."""
    return next((cpu for path in counter_files(container_id) if (cpu := _counter(path)) is not None), None)


def timed(owner: type, name: str, phase: str) -> None:
    original = getattr(owner, name)

    @functools.wraps(original)
    async def wrapper(self, *args, **kwargs):
        sandbox = getattr(self, "sandbox", self)
        cid = sandbox.container.id if isinstance(sandbox, Sandbox) else None
        before = container_cpu(cid) if cid else None
        start = time.perf_counter()
        try:
            return await original(self, *args, **kwargs)
        finally:
            wall[phase].append(time.perf_counter() - start)
            after = container_cpu(cid) if cid else None
            if before is not None and after is not None:
                in_container[phase].append(after - before)

    setattr(owner, name, wrapper)


def total_cpu() -> float:
    fields = open("/proc/stat").readline().split()[1:]
    busy = sum(int(v) for i, v in enumerate(fields) if i not in (3, 4))  # all but idle and iowait
    return busy / TICKS


class CpuSampler(threading.Thread):
    """Every 0.1 s: each container's CPU (its cgroup's counter, kept after the container goes) and the engine's
    processes' own CPU (dockerd, containerd, shims; not their reaped children, which are the containers')."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.first: dict[str, float] = {}
        self.seen: dict[str, float] = {}
        self.stop = threading.Event()

    def note(self, key: str, cpu: float, existed_before: bool = True) -> None:
        self.first.setdefault(key, cpu if existed_before else 0.0)
        self.seen[key] = cpu

    def sample(self, first: bool = False) -> None:
        for path in counter_files():
            cpu = _counter(path)
            if cpu is not None:
                self.note(f"container {path.parent.name}", cpu, existed_before=first)
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                text = open(f"/proc/{entry}/stat").read()
            except OSError:
                continue
            comm = text[text.index("(") + 1 : text.rindex(")")]
            if comm in ENGINE:
                rest = text[text.rindex(")") + 2 :].split()
                self.note(f"engine {entry}", sum(int(v) for v in rest[11:13]) / TICKS, existed_before=first)

    def run(self) -> None:
        while not self.stop.is_set():
            self.sample()
            time.sleep(0.1)

    def used(self, kind: str) -> float:
        return sum(cpu - self.first[key] for key, cpu in self.seen.items() if key.startswith(kind))


async def main_async(args: argparse.Namespace) -> dict:
    timed(Sandbox, "create", "container start")
    timed(Sandbox, "destroy", "container removal")
    timed(Sandbox, "run", "agent commands")
    timed(TaskWorkspace, "setup", "workspace set-up")
    timed(TaskWorkspace, "evaluate", "evaluations")
    timed(SandboxPool, "acquire", "waiting for a container")
    sampler = CpuSampler()
    sampler.sample(first=True)
    sampler.start()
    cpu0, own0 = total_cpu(), time.process_time()
    with tempfile.TemporaryDirectory(prefix="air-profile-") as tmp:
        seconds = await concurrent_rollouts(args.rollouts, args.policy, Path(tmp))
    sampler.stop.set()
    sampler.join()
    sampler.sample()
    cpu, own = total_cpu() - cpu0, time.process_time() - own0
    containers, engine = sampler.used("container"), sampler.used("engine")
    return {
        "rollouts": args.rollouts,
        "elapsed_s": seconds,
        "rollouts_per_min": args.rollouts / seconds * 60,
        "wall_s": {phase: {"sum": sum(v), "count": len(v), "mean": sum(v) / len(v)} for phase, v in wall.items()},
        "container_cpu_s": {phase: sum(v) for phase, v in in_container.items()},
        "cpu_s": {
            "machine": cpu,
            "this process (env, policy server, docker client)": own,
            "containers (shells, set-up, evaluations, agent code, runc's exec set-up)": containers,
            "docker engine's own (dockerd, containerd, shims)": engine,
            "the rest (runc outside containers, kernel, other processes)": cpu - own - containers - engine,
            "cores_busy": cpu / seconds,
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--rollouts", type=int, default=32)
    parser.add_argument("--policy", default="improve")
    args = parser.parse_args()
    result = asyncio.run(main_async(args))
    if args.json:
        print(json.dumps(result))
        return
    print(f"{result['rollouts']} rollouts in {result['elapsed_s']:.1f} s: {result['rollouts_per_min']:.1f}/min")
    for phase, figures in sorted(result["wall_s"].items(), key=lambda kv: -kv[1]["sum"]):
        print(f"  wall  {phase:28} {figures['sum']:7.1f} s over {figures['count']:3} (mean {figures['mean']:.3f} s)")
    for phase, value in result["container_cpu_s"].items():
        print(f"  cpu   in the container during {phase:26} {value:7.1f}")
    for part, value in result["cpu_s"].items():
        print(f"  cpu   {part:50} {value:7.1f}")


if __name__ == "__main__":
    assert PolicyServer  # the policy server runs in this process (its CPU is this process's)
    main()
