"""Red team, links where root works (issue 20, classes 3 and 4), through the env's rollout path.

Every folder on root's way to the workspace is the agent's (/home/agent included), so a link the agent
plants there once led root's restore (cp, mv, install -d) wherever it pointed. Root now copies the
submission out without following links, and the evaluator of a CSV or Python task works in its private
copy: nothing is written into the workspace, and a workspace that is a link is refused.
"""

from __future__ import annotations

import pytest

from tests.red_team import check_rollout, honest_evaluation, run_attack

pytestmark = pytest.mark.docker

ELSEWHERE = "/tmp/elsewhere"
MOVE_WORKSPACE = (
    f"mkdir {ELSEWHERE} && cp -r . {ELSEWHERE}/ && cd / && mv /home/agent/workspace /home/agent/moved "
    f"&& ln -s {ELSEWHERE} /home/agent/workspace && cd /home/agent/workspace && pwd -P"
)
# Whatever root put at the link's target, and whether root's own folder is still closed.
ROOTS_TRACES = f"find {ELSEWHERE} -user root -printf '%u %p\\n' 2>&1; stat -c 'opt-air %a' /opt/air"


@pytest.mark.timeout(300)
async def test_a_linked_workspace_gets_nothing_from_root_in_a_game(tmp_path, docker_image):
    commands = [MOVE_WORKSPACE, "validate", ROOTS_TRACES]
    output, record = await run_attack(tmp_path, docker_image, commands)
    check_rollout(output, record)
    assert record.turns[0].output.startswith(ELSEWHERE)
    assert record.turns[2].output.startswith("opt-air 700"), "root wrote through the link"
    honest_evaluation(record, 1)  # the strategy is the agent's own, whichever folder holds it
