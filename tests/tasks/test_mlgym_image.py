"""MLGym's image (no system python3; its only Python a conda env the agent owns), through the env's real
path with a stand-in built here (tests/mlgym_image.py): refused as is, before any rollout, with the fix in one
line; prepared by `air build-image --from`, it scores what our image scores, and no start-up hook the agent
plants (a .pth, sitecustomize/usercustomize, a replaced interpreter, a fake env where the real one was, shared
objects) runs in the evaluation."""

from __future__ import annotations

import base64
import math
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from air.policies.scripted import ScriptPolicy
from air.tasks.trusted_python import ImageNotPrepared
from tests import rollouts
from tests.mlgym_image import MLGYM_ENV, prepared_standin_image, standin_image
from tests.red_team import heredoc, is_agents_uid, run_attack

pytestmark = [pytest.mark.docker, pytest.mark.timeout(600)]

HONEST = {"loanDefault": ["python baseline.py", "validate"], "laneMerge": ["validate"]}
_HONEST_SCORES: dict[tuple[str, str], float] = {}


@pytest.fixture(scope="session")
def standin(docker_image: str) -> str:
    return standin_image(docker_image)


@pytest.fixture(scope="session")
def prepared(docker_image: str) -> str:
    return prepared_standin_image(docker_image)


async def honest_score(tmp_path: Path, image: str, task: str) -> float:
    """The score of the task's honest commands in ``image`` under the red-team seed (once per session)."""
    if (image, task) not in _HONEST_SCORES:
        _, record = await run_attack(tmp_path / f"honest-{task}", image, HONEST[task], task=task)
        evaluation = record.turns[-1].evaluation
        assert evaluation is not None and evaluation.status == "ok", evaluation
        _HONEST_SCORES[image, task] = evaluation.score
    return _HONEST_SCORES[image, task]


async def test_the_unprepared_image_is_refused_before_any_rollout(tmp_path: Path, standin: str) -> None:
    env = rollouts.make_env(tmp_path, standin, task_configs=["loanDefault"], max_turns=2)
    with pytest.raises(ImageNotPrepared) as info:
        await rollouts.run_group(env, ScriptPolicy(["echo started"]), "loanDefault")
    message = str(info.value)
    assert "\n" not in message, message
    assert f"`uv run air build-image --from {standin}`" in message, message
    assert f"{MLGYM_ENV}/bin/python" in message and "the agent" in message, message
    ran = (tmp_path / "trajectories").exists() and any(record.turns for record in rollouts.trajectories(tmp_path))
    assert not ran, "a rollout ran"


@pytest.mark.parametrize("task", ["loanDefault", "laneMerge"])
async def test_the_prepared_image_scores_what_ours_scores(tmp_path: Path, docker_image: str, prepared: str, task: str):
    ours = await honest_score(tmp_path / "ours", docker_image, task)
    theirs = await honest_score(tmp_path / "prepared", prepared, task)
    assert math.isclose(ours, theirs, abs_tol=1e-9), (ours, theirs)


# --- every start-up hook the agent can plant ---------------------------------------------------------

SITE = f"{MLGYM_ENV}/lib/python3.11/site-packages"
USER_SITE = "$HOME/.local/lib/python3.11/site-packages"
MARKERS = "/tmp/air-hook"  # each hook that runs touches /tmp/air-hook-<name>-<uid>


def _py_hook(name: str) -> str:
    return f'import os; open("{MARKERS}-{name}-%d" % os.getuid(), "w").close()'


_SO_SOURCE = f"""
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>
__attribute__((constructor)) static void air_hook(void) {{
    char path[96];
    snprintf(path, sizeof path, "{MARKERS}-so-%d", (int)getuid());
    int fd = open(path, O_CREAT | O_WRONLY, 0644);
    if (fd >= 0) close(fd);
}}
"""


def _shared_object(tmp_path: Path) -> bytes:
    """A shared object whose constructor leaves a marker (gcc here); without gcc, bytes no loader accepts:
    a load then fails the evaluation, which the honest score catches as well."""
    if not shutil.which("gcc"):
        return b"\x7fELF not really\n"
    (tmp_path / "hook.c").write_text(_SO_SOURCE)
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-o", tmp_path / "hook.so", tmp_path / "hook.c"], check=True)
    return (tmp_path / "hook.so").read_bytes()


FAKE_PYTHON = f"""#!/bin/sh
touch {MARKERS}-fakepython-$(id -u)
echo '{{"Score": 99.0, "accuracy": 1.0, "f1": 1.0, "auc": 1.0}}'
"""


def attack_commands(shared_object: bytes) -> list[str]:
    so = base64.b64encode(shared_object).decode()
    in_place = "; ".join(
        [
            f"mkdir -p {USER_SITE} ~/.local/lib",
            f"for d in {SITE} {USER_SITE}; do"
            f" echo '{_py_hook('pth')}' > $d/air_hook.pth;"
            f" echo '{_py_hook('sitecustomize')}' > $d/sitecustomize.py;"
            f" echo '{_py_hook('usercustomize')}' > $d/usercustomize.py; done",
            f"echo {so} | base64 -d > ~/.local/lib/air_hook.so",
            'echo "export LD_PRELOAD=$HOME/.local/lib/air_hook.so" >> ~/.bashrc',
            "true",
        ]
    )
    replace = "; ".join(
        [
            f"cp ~/.local/lib/air_hook.so {MLGYM_ENV}/lib/libz.so.1",
            f"cp ~/fake_python {MLGYM_ENV}/bin/python3.11",
            "true",
        ]
    )
    fake_lib = f"{MLGYM_ENV}/lib"
    swap = "; ".join(
        [
            "mv ~/miniconda3 ~/miniconda3.moved",
            f"mkdir -p {MLGYM_ENV}/bin {fake_lib}/python3.11/site-packages {fake_lib}/python3.11/lib-dynload",
            f"cp ~/fake_python {MLGYM_ENV}/bin/python",
            f"ln -s python {MLGYM_ENV}/bin/python3; ln -s python {MLGYM_ENV}/bin/python3.11",
            f"echo '{_py_hook('fakepth')}' > {fake_lib}/python3.11/site-packages/air_hook.pth",
            f"echo '{_py_hook('fakesite')}' > {fake_lib}/python3.11/site-packages/sitecustomize.py",
            *(
                f"cp ~/.local/lib/air_hook.so {fake_lib}/{name}"
                for name in ("libpython3.11.so.1.0", "libz.so.1", "libexpat.so.1", "libffi.so.8", "libopenblas.so.0")
            ),
            f"cp ~/.local/lib/air_hook.so {fake_lib}/python3.11/lib-dynload/_json.cpython-311-x86_64-linux-gnu.so",
            "ls -la ~/miniconda3/envs",
        ]
    )
    return [heredoc("~/fake_python", FAKE_PYTHON) + "\nchmod +x ~/fake_python", in_place, replace, swap]


IMAGE_UID = 1000  # the image's agent, and its files'
SHOW_MARKERS = f"ls {MARKERS}-* 2>/dev/null; echo listed"


@pytest.mark.parametrize("task", ["loanDefault", "laneMerge"])
async def test_no_start_up_hook_of_the_agent_runs_in_the_evaluation(
    tmp_path: Path, docker_image: str, prepared: str, task: str
) -> None:
    honest = await honest_score(tmp_path / "ours", docker_image, task)
    work = HONEST[task][:-1]  # the honest work first (the agent's own python), then the hooks, then validate
    commands = [*work, *attack_commands(_shared_object(tmp_path)), "validate", SHOW_MARKERS]
    output, record = await run_attack(tmp_path / "attack", prepared, commands, task=task)
    assert output.get("error") is None, output.get("error")
    evaluation = record.turns[-2].evaluation
    assert evaluation is not None and evaluation.status == "ok", evaluation
    assert math.isclose(evaluation.score, honest, abs_tol=1e-9), (evaluation.score, honest)
    listed = record.turns[-1].output
    ran = re.findall(rf"{MARKERS}-(\w+)-(\d+)", listed)
    assert not [(hook, uid) for hook, uid in ran if not is_agents_uid(int(uid))], f"ran in the evaluation: {listed}"


@pytest.mark.parametrize(
    "change",
    [
        "chown agent /usr/lib/python3/dist-packages/numpy/__init__.py",
        "chmod o+w /usr/lib/python3.11/encodings",
        "touch /usr/lib/python3/dist-packages/zz.pth; chgrp 1000 /usr/lib/python3/dist-packages/zz.pth;"
        " chmod g+w /usr/lib/python3/dist-packages/zz.pth",
    ],
)
async def test_the_check_finds_one_file_the_agent_can_write(docker_image: str, change: str) -> None:
    """Our own image passes; one file or folder deep in what the interpreter loads, made the agent's, fails."""
    from air.sandbox.config import SandboxConfig
    from air.sandbox.container import Sandbox
    from air.tasks import trusted_python

    sandbox = await Sandbox.create(
        SandboxConfig(image=docker_image, run_id="pytest", cpus=1.0, memory="1g", tmp_size="512m")
    )
    try:
        trusted_python._CHECKED.clear()
        assert (await trusted_python.evaluation_python(sandbox)).python == "/usr/bin/python3"
        code, out = await sandbox.exec_root(["sh", "-c", change])
        assert code == 0, out
        trusted_python._CHECKED.clear()
        with pytest.raises(ImageNotPrepared, match="build-image --from") as info:
            await trusted_python.evaluation_python(sandbox)
        assert change.split()[-1].rstrip(";") in str(info.value)
    finally:
        trusted_python._CHECKED.clear()
        await sandbox.destroy()


async def test_the_hooks_do_run_where_the_check_is_bypassed(
    tmp_path: Path, standin: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The attacks above have teeth: in the unprepared image, with the check skipped, they run as root's runner
    and as the evaluator."""
    from air.sandbox import container
    from air.tasks import trusted_python, workspace

    async def unchecked(sandbox):
        return trusted_python.EvaluationPython(f"{MLGYM_ENV}/bin/python", f"{MLGYM_ENV}/bin")

    monkeypatch.setattr(workspace, "evaluation_python", unchecked)
    # The agent as the image made it, the env's owner (uid 1000): as under userns-remap. With a uid of its own it
    # cannot write the env, nor rename it away on overlay2 (EXDEV), but on btrfs or zfs it could.
    monkeypatch.setattr(container, "agent_uid", lambda *_: None)
    commands = [*attack_commands(_shared_object(tmp_path))[:2], "validate", SHOW_MARKERS]
    _, record = await run_attack(tmp_path / "attack", standin, commands, task="laneMerge")
    ran = {(hook, int(uid)) for hook, uid in re.findall(rf"{MARKERS}-(\w+)-(\d+)", record.turns[-1].output)}
    # As root (the runner) and as the evaluator. (The stand-in's stdlib has Debian's own sitecustomize, found
    # before the one planted in site-packages; a conda env has none.)
    assert ("pth", 0) in ran and any(hook == "pth" and uid not in (0, IMAGE_UID) for hook, uid in ran), ran
