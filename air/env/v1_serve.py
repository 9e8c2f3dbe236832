"""``python -m air.env.v1_serve ENV_JSON ADDRESS CAPACITY``: serve a v1 env (verifiers' own ``serve_env``,
one process) on ADDRESS, at most CAPACITY episodes at once. An env node (:mod:`air.fleet.node`) runs it
behind its gate, on a private socket; it needs no prime-rl, only verifiers v1 (a60a606 or 0.4)."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path


def _log_setup() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    env_json, address, capacity = argv
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
