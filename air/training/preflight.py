"""``air check``: everything a training run needs, checked before any GPU is touched.

Each check returns rows of pass / warn / fail / n/a, each failure with its fix. Nothing here starts a
container, loads a model or signals a process. Checks that need a GPU report "n/a" plainly on a
machine without one; the rest still run. Network probes use short timeouts, so the whole check
stays well under 20 seconds.
"""

from __future__ import annotations

from collections.abc import Callable

from air.training.preflight_checks import check_config, check_docker, check_env_loads, check_leftovers, check_tasks
from air.training.preflight_host import check_endpoint, check_gpus, check_prime_rl
from air.training.preflight_rows import Check, CheckRow, PreflightContext, PreflightOptions


def run_preflight(options: PreflightOptions, on_row: Callable[[CheckRow], None] | None = None) -> list[CheckRow]:
    ctx = PreflightContext(options)
    rows: list[CheckRow] = []
    for check in CHECKS:
        try:
            produced = list(check(ctx))
        except Exception as exc:  # a broken check is reported, never fatal to the others
            produced = [CheckRow(check.__name__.removeprefix("check_"), "fail", f"the check itself failed: {exc!r}")]
        for row in produced:
            rows.append(row)
            if on_row:
                on_row(row)
    return rows


# Leftovers first: the GPU check labels processes air recorded.
CHECKS: list[Check] = [
    check_config,
    check_docker,
    check_tasks,
    check_leftovers,
    check_gpus,
    check_endpoint,
    check_prime_rl,
    check_env_loads,
]
