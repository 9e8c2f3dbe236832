"""``python -m air.env.v1_serve ENV_JSON ADDRESS CAPACITY``: serve a v1 env (verifiers' own ``serve_env``,
one process) on ADDRESS, at most CAPACITY episodes at once. An env node (:mod:`air.fleet.node`) runs it
behind its gate, on a private socket; it needs no prime-rl, only verifiers v1 (a60a606 or 0.4). Under a
node it ends itself when that node is gone, however it ended (a SIGKILL too)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import sys
import threading
from pathlib import Path

from air.sandbox.neutral import log_to_stderr

# Set by air.fleet.node: the read end of a pipe whose write end only the node holds, so EOF says it is gone.
NODE_PIPE = "AIR_FLEET_NODE_PIPE"


def _log_setup() -> None:
    log_to_stderr(logging.INFO)  # a masked rollout's line quotes the container


def end_with_node() -> None:
    """SIGTERM this process once its env node is gone: an orphan would go on serving nobody and making
    containers under the node's label (verifiers' serve_env turns the SIGTERM into a clean stop)."""
    fd = os.environ.pop(NODE_PIPE, "")
    if not fd.isdigit():
        return
    pipe = int(fd)
    os.set_inheritable(pipe, False)  # not for what the env starts: only this process waits on it

    def watch() -> None:
        with contextlib.suppress(OSError):
            while os.read(pipe, 1):
                pass
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="node-watch", daemon=True).start()


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    env_json, address, capacity = argv
    end_with_node()
    from verifiers.v1.serve import serve_env

    serve_env(
        max_workers=1,
        address=address,
        log_setup=_log_setup,
        config_data=json.loads(Path(env_json).read_text()),
        max_concurrent=int(capacity),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
