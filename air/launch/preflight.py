"""``air check``: everything a training run needs, checked before any GPU is touched.

Each check returns rows of pass / warn / fail / n/a, each failure with its fix. Nothing here starts a
container, loads a model or signals a process. Checks that need a GPU report "n/a" plainly on a
machine without one; the rest still run. Network probes use short timeouts. How long the whole takes
is not promised: importing verifiers and loading the env dominate, 6 s on an idle 2-core host and
five times that on a loaded one; the caller is told which check runs, and shows the time it took.
"""

from __future__ import annotations

from collections.abc import Callable

from air.launch.preflight_checks import check_config, check_docker, check_env_loads, check_leftovers, check_tasks
from air.launch.preflight_host import check_endpoint, check_gpus, check_prime_rl
from air.launch.preflight_rows import Check, CheckRow, PreflightContext, PreflightOptions


def run_preflight(
    options: PreflightOptions,
    on_row: Callable[[CheckRow], None] | None = None,
    on_check: Callable[[str, int, int], None] | None = None,
) -> list[CheckRow]:
    """Every check in turn; ``on_check(name, number, of)`` before each one starts (progress to show)."""
    ctx = PreflightContext(options)
    rows: list[CheckRow] = []
    for number, check in enumerate(CHECKS, start=1):
        if on_check:
            on_check(check_name(check), number, len(CHECKS))
        try:
            produced = list(check(ctx))
        except Exception as exc:  # a broken check is reported, never fatal to the others
            produced = [CheckRow(check_name(check), "fail", f"the check itself failed: {exc!r}")]
        for row in produced:
            rows.append(row)
            if on_row:
                on_row(row)
    return rows


def check_name(check: Check) -> str:
    """``check_env_loads`` -> "env loads"."""
    return check.__name__.removeprefix("check_").replace("_", " ")


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
