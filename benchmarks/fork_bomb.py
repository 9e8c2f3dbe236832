"""How long root takes to kill every process of the agent while a fork bomb holds every pid of its container.

Two ways, alternated: the keep-alive signalled through the engine (``keep_alive.free_the_agents_pids``, what a
restart uses) and root's ``docker exec`` of ``kill_user_argv`` (what it used before; the exec itself needs a pid and
fails as often as not: "read init-p"). Each round: a container of the sandbox image as the sandbox makes it
(``container_kwargs``: init, keep-alive, ``--pids-limit``), a Python fork bomb as the agent, 3 s to fill the pids.

    uv run python benchmarks/fork_bomb.py --rounds 5 --json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from air.sandbox.config import SandboxConfig
from air.sandbox.container import container_kwargs, docker_client
from air.sandbox.keep_alive import free_the_agents_pids
from air.sandbox.root_side import as_user_argv, kill_user_argv

BOMB = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"


def one_round(config: SandboxConfig, how: str) -> dict:
    client = docker_client()
    container = client.containers.run(**container_kwargs(config, {"air.benchmark": "fork_bomb"}))
    try:
        container.exec_run(as_user_argv(config.user, ["python3", "-c", BOMB]), user="root", detach=True)
        time.sleep(3)
        full = container.stats(stream=False, one_shot=True)["pids_stats"]
        start = time.perf_counter()
        if how == "keep-alive":
            free_the_agents_pids(container, 1)
            failed = 0
        else:  # root's exec, again until it starts and the pids are free
            failed = 0
            while container.exec_run(kill_user_argv(config.user), user="root").exit_code == 126:
                failed += 1
        seconds = time.perf_counter() - start
        left = container.stats(stream=False, one_shot=True)["pids_stats"]
        return {"how": how, "seconds": round(seconds, 3), "exec_failures": failed, "pids_before": full, "after": left}
    finally:
        container.remove(force=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pids", type=int, default=64)
    parser.add_argument("--image", default=None, help="default: the sandbox image set-up builds")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    settings = dict(run_id="bench-fork-bomb", pids_limit=args.pids, cpus=1.0, memory="1g", tmp_size="512m", disk="")
    config = SandboxConfig(**settings, **({"image": args.image} if args.image else {}))
    rows = [one_round(config, how) for _ in range(args.rounds) for how in ("keep-alive", "exec")]
    summary = {
        how: {
            "median_s": statistics.median(r["seconds"] for r in rows if r["how"] == how),
            "exec_failures": sum(r["exec_failures"] for r in rows if r["how"] == how),
        }
        for how in ("keep-alive", "exec")
    }
    print(json.dumps({"rounds": rows, "summary": summary}, indent=2 if not args.json else None))


if __name__ == "__main__":
    main()
