"""The agent-side worker's interpreter (issue 31): the agent's code by design is its workspace modules,
which the worker imports; nothing else of the agent's choosing runs there before them. A ``.pth`` file and a
``usercustomize.py`` in the agent's user site used to run in the worker at start-up (``python -B``, HOME the
agent's); the worker now starts with ``-s`` and an environment the runner writes (no ``PYTHON*`` variable
of the agent's)."""

from __future__ import annotations

import pytest

from tests.red_team import LOOT, RESTORE, check_rollout, honest_evaluation, plant, run_attack, wrap

pytestmark = pytest.mark.docker

USER_SITE = 'SITE=$(python3 -c "import site; print(site.getusersitepackages())") && mkdir -p "$SITE"'
PLANT_SITE = "\n".join(
    [
        USER_SITE,
        f"mkdir -p {LOOT} && chmod 777 {LOOT}",
        f"""echo "import os; open('{LOOT}/pth_ran_' + str(os.getpid()), 'w')" > "$SITE/rt.pth" """,
        f"""echo "open('{LOOT}/usercustomize_ran', 'w')" > "$SITE/usercustomize.py" """,
        'echo "export PYTHONSTARTUP=~/rt.py PYTHONPATH=/tmp" >> ~/.bashrc',
        "python3 -c 'print(1)' && ls " + LOOT,  # positive control: the agent's own python runs them
    ]
)
# In the worker: whether the user site was on, written where the agent reads it afterwards.
FLAGS = f"""
if _rt_calls == 1:
    import sys
    with open("{LOOT}/worker_flags", "w") as f:
        f.write("no_user_site=%d" % sys.flags.no_user_site)
"""


@pytest.mark.timeout(300)
async def test_the_worker_runs_nothing_of_the_agents_site(tmp_path, docker_image):
    commands = [
        PLANT_SITE,
        f"rm -f {LOOT}/pth_ran_* {LOOT}/usercustomize_ran",
        plant("", wrap(FLAGS)),
        "validate",
        f"ls {LOOT}; cat {LOOT}/worker_flags",
        RESTORE,
        "validate",
    ]
    output, record = await run_attack(tmp_path, docker_image, commands)
    check_rollout(output, record)
    assert "pth_ran_" in record.turns[0].output and "usercustomize_ran" in record.turns[0].output, (
        "the planted site files did not run in the agent's own python: the test proves nothing"
    )
    after = record.turns[4].output
    assert "no_user_site=1" in after, after
    assert "pth_ran_" not in after and "usercustomize_ran" not in after, f"the agent's site ran in the worker: {after}"
    honest_evaluation(record, 6)
