"""``air rehearse`` before anything runs: what it reads from a config, what it refuses and why, and each
missing piece named with its fix (prime-rl absent, at another commit, without a venv; a bad TOML)."""

from __future__ import annotations

from pathlib import Path

import pytest

from air.cli.main import main
from air.launch.config_files import PRIME_RL_COMMIT
from air.rehearsal.checks import find_orchestrator_python
from air.rehearsal.classic.plan import plan_config
from air.rehearsal.errors import RehearsalError
from air.rehearsal.report import RehearsalReport
from tests.git_repo import git

ROOT = Path(__file__).resolve().parents[2]


def test_a_shipped_config_is_read_for_strategy_group_size_and_what_is_dropped():
    plan = plan_config(ROOT / "configs" / "mlgym" / "rl_2gpu.toml")
    assert (plan.strategy, plan.group_size, plan.batch_size) == ("branching", 4, 16)
    assert plan.max_model_len == 4096
    assert set(plan.dropped) == {"wandb", "ckpt"}


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ('[orchestrator]\nbatch_size = 4\n[[orchestrator.env]]\nid = "primeintellect/x"\n', "Prime hub"),
        ('[orchestrator]\n[orchestrator.weight_broadcast]\ntype = "nccl"\n', "nccl"),
        ('[orchestrator]\n[orchestrator.teacher_model]\nname = "m"\n', "teacher model"),
        ('[orchestrator]\n[orchestrator.rollout_transport]\ntype = "zmq"\n', "reads batches from files"),
        ("[orchestrator]\nbatch_size = 4\n", "no \\[\\[orchestrator.env\\]\\]"),
        ("[orchestrator\nbatch_size = 4\n", "not valid TOML"),
    ],
)
def test_what_a_cpu_rehearsal_cannot_honour_is_refused_with_the_reason(tmp_path, toml, message):
    config = tmp_path / "rl.toml"
    config.write_text(toml)
    with pytest.raises(RehearsalError, match=message):
        plan_config(config)


def test_a_missing_config_is_named(tmp_path):
    with pytest.raises(RehearsalError, match=f"cannot read {tmp_path / 'nope.toml'}"):
        plan_config(tmp_path / "nope.toml")


def test_prime_rl_missing_elsewhere_or_without_a_venv_is_named_with_the_install_command(tmp_path):
    with pytest.raises(RehearsalError, match="not a prime-rl checkout.*--orchestrator-only"):
        find_orchestrator_python(str(tmp_path / "absent"))
    checkout = tmp_path / "prime-rl"
    (checkout / "src" / "prime_rl").mkdir(parents=True)
    (checkout / "pyproject.toml").write_text('[project]\nname = "prime-rl"\n')
    git(checkout, "init", "-q")
    git(checkout, "add", "-A")
    git(checkout, "commit", "-qm", "not the pin")
    with pytest.raises(RehearsalError, match=f"not the pinned {PRIME_RL_COMMIT}"):
        find_orchestrator_python(str(checkout))


def test_the_cli_refuses_zero_steps_and_reports_a_missing_prime_rl(tmp_path, capsys):
    config = ROOT / "configs" / "mlgym" / "rl_2gpu.toml"
    assert main(["rehearse", "--config", str(config), "--steps", "0"]) != 0
    assert "--steps must be at least 1" in capsys.readouterr().err
    assert main(["rehearse", "--config", str(config), "--prime-rl", str(tmp_path / "none")]) != 0
    assert "install_prime_rl.sh --orchestrator-only" in capsys.readouterr().err
    v1 = str(ROOT / "configs" / "mlgym-v1" / "rl_2gpu.toml")
    assert main(["rehearse", "--config", v1, "--external-env-server", "lane:5000"]) != 0
    assert "expected SOURCE=tcp://HOST:PORT" in capsys.readouterr().err
    assert main(["rehearse", "--config", v1, "--prime-rl", str(tmp_path / "none")]) != 0
    assert "--orchestrator-only --commit 559b447" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("folder", "install"),
    [
        ("mlgym", "install_prime_rl.sh --cpu-trainer "),
        ("mlgym-v1", "install_prime_rl.sh --cpu-trainer --commit 559b447"),
    ],
)
def test_with_trainer_a_missing_prime_rl_names_the_install_that_has_a_trainer(tmp_path, capsys, folder, install):
    # --orchestrator-only has no trainer: following it, the user would have to install a second time.
    config = str(ROOT / "configs" / folder / "rl_2gpu.toml")
    assert main(["rehearse", "--config", config, "--trainer", "--prime-rl", str(tmp_path / "none")]) == 1
    err = capsys.readouterr().err
    assert install in err and "--orchestrator-only" not in err
    checkout = tmp_path / "prime-rl"  # a checkout without any venv: the same install named
    (checkout / "src" / "prime_rl" / "entrypoints").mkdir(parents=True)
    (checkout / "src" / "prime_rl" / "entrypoints" / "env_server.py").write_text("")
    git(checkout, "init", "-q")
    git(checkout, "add", "-A")
    git(checkout, "commit", "-qm", "today's")
    with pytest.raises(RehearsalError, match="no venv with prime-rl's orchestrator.*--cpu-trainer --commit 559b447"):
        find_orchestrator_python(str(checkout), "v1", trainer=True)


def _report(**changes) -> RehearsalReport:
    figures = dict(
        config="c", output_dir="o", steps_requested=3, steps_completed=3, rollouts=8, masked=0, samples=20,
        reward_mean=0.2, advantage_nonzero_share=0.5, zero_advantage_groups=1, loss_mask_ok=True,
        samples_per_rollout=2.5, seconds_per_step=10.0, trajectory_strategy="branching", groups=4, masked_samples=0,
        advantages_match_rewards=True, rollouts_without_samples=0, loss_tokens=100, weight_updates=3,
    )  # fmt: skip
    return RehearsalReport(**{**figures, **changes})


def test_the_verdict_fails_a_run_that_could_not_teach_anything():
    assert _report().problems() == [] and "1 of 4 groups teach nothing" in _report().warnings()[0]
    assert "loss would stay 0.0" in _report(advantage_nonzero_share=0.0).problems()[0]
    assert "no sample reached the trainer" in _report(samples=0).problems()[0]
    assert "every rollout was masked" in _report(masked=8).problems()[0]
    assert _report(masked=2).problems() == [] and "2 of 8 rollouts masked" in _report(masked=2).warnings()[0]
    assert "trainer would fail: step 1: boom" in _report(trainer_errors=["step 1: boom"]).problems()[0]


def test_an_env_that_cannot_load_is_named_before_the_orchestrator_starts():
    from air.rehearsal.checks import check_envs_load

    debug = plan_config(ROOT / "configs" / "mlgym" / "rl_debug.toml")  # MLGym's titanic, $MLGYM_ROOT unset here
    assert any(item.startswith("env_gpu of") for item in debug.dropped)
    with pytest.raises(RehearsalError, match=r"env 'mlgym-titanic' \(air_mlgym\) does not load: .*titanic.*MLGYM_ROOT"):
        check_envs_load(debug.envs, ("env_gpu",))
    check_envs_load(plan_config(ROOT / "configs" / "mlgym" / "rl_2gpu.toml").envs, ("env_gpu",))  # loads


def test_a_checkout_of_the_other_generation_is_named_with_what_to_do(tmp_path):
    checkout = tmp_path / "prime-rl"
    (checkout / "src" / "prime_rl").mkdir(parents=True)
    (checkout / "pyproject.toml").write_text('[project]\nname = "prime-rl"\n')
    git(checkout, "init", "-q")
    git(checkout, "add", "-A")
    git(checkout, "commit", "-qm", "classic-looking")
    with pytest.raises(RehearsalError, match="written for today's prime-rl.*--commit 559b447"):
        find_orchestrator_python(str(checkout), "v1")
    entry = checkout / "src" / "prime_rl" / "entrypoints"
    entry.mkdir()
    (entry / "env_server.py").write_text("")
    git(checkout, "add", "-A")
    git(checkout, "commit", "-qm", "today's")
    with pytest.raises(RehearsalError, match="rehearse a config from configs/mlgym-v1/"):
        find_orchestrator_python(str(checkout), "classic")
    with pytest.raises(RehearsalError, match="no venv with prime-rl's orchestrator.*--commit 559b447"):
        find_orchestrator_python(str(checkout), "v1")


def test_a_classic_config_refuses_an_external_env_server(tmp_path):
    from air.rehearsal.rehearse import RehearsalSettings, rehearse

    config = tmp_path / "rl.toml"
    config.write_text('[orchestrator]\nrollouts_per_example = 2\n[[orchestrator.env]]\nid = "air_mlgym"\n')
    settings = RehearsalSettings(config=config, external_env_servers={"x": "tcp://127.0.0.1:1"})
    with pytest.raises(RehearsalError, match="classic config: prime-rl c87c19b has no env servers"):
        rehearse(settings)


def _v1_checkout(tmp_path: Path, python: str) -> Path:
    """A prime-rl look-alike of today's generation whose venv's "python" is the shell script ``python``."""
    checkout = tmp_path / "prime-rl"
    (checkout / "src" / "prime_rl" / "entrypoints").mkdir(parents=True)
    (checkout / "src" / "prime_rl" / "entrypoints" / "env_server.py").write_text("")
    (checkout / "pyproject.toml").write_text('[project]\nname = "prime-rl"\n')
    git(checkout, "init", "-q")
    git(checkout, "add", "-A")
    git(checkout, "commit", "-qm", "today's")
    stand_in = checkout / ".venv" / "bin" / "python"
    stand_in.parent.mkdir(parents=True)
    stand_in.write_text(f"#!/bin/sh\n{python}\n")
    stand_in.chmod(0o755)
    return checkout


def test_an_import_slower_than_the_bound_is_one_error_naming_the_wait_and_the_fix(tmp_path):
    checkout = _v1_checkout(tmp_path, "exec sleep 5")
    with pytest.raises(RehearsalError) as caught:
        find_orchestrator_python(str(checkout), "v1", timeout_s=1)
    message = str(caught.value)
    assert "waited 1 s for" in message and str(checkout / ".venv" / "bin" / "python") in message
    assert "import prime_rl.orchestrator.orchestrator" in message and "pass --timeout" in message
    assert "\n" not in message and "Traceback" not in message and "TimeoutExpired" not in message
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_a_slow_import_that_succeeds_is_waited_for_and_announced(tmp_path):
    checkout = _v1_checkout(tmp_path, "sleep 1\nexit 0")
    heard: list[tuple[str, int, int]] = []
    python, root = find_orchestrator_python(str(checkout), "v1", say=lambda *event: heard.append(event))
    assert (python, root) == (checkout / ".venv" / "bin" / "python", checkout)
    assert [(done, total) for what, done, total in heard] == [(0, 1), (1, 1)]
    assert all("importing prime-rl's orchestrator" in what and "can take minutes" in what for what, _, _ in heard)


def test_a_failing_import_or_a_python_that_cannot_start_is_one_error_with_the_install_command(tmp_path):
    checkout = _v1_checkout(tmp_path, "echo 'ModuleNotFoundError: No module named prime_rl' >&2\nexit 1")
    with pytest.raises(RehearsalError, match=r"cannot import .*\(ModuleNotFoundError: No module named prime_rl\)"):
        find_orchestrator_python(str(checkout), "v1")
    (checkout / ".venv" / "bin" / "python").chmod(0o644)
    with pytest.raises(RehearsalError, match=r"cannot start .*python \(Permission denied\); run .*--commit 559b447"):
        find_orchestrator_python(str(checkout), "v1")


def test_a_derivation_past_its_bound_or_that_cannot_start_is_a_rehearsal_error(tmp_path):
    import sys

    from air.rehearsal.launch import run_entry

    slow = ["-c", "import time; time.sleep(5)"]
    with pytest.raises(RehearsalError, match=r"^deriving: waited 1 s for .*time.sleep\(5\).*pass --timeout"):
        run_entry(Path(sys.executable), slow, tmp_path, "deriving", timeout=1)
    with pytest.raises(RehearsalError, match=r"^deriving: cannot start .*absent"):
        run_entry(tmp_path / "absent", ["-c", "pass"], tmp_path, "deriving")


def test_the_cli_prints_a_slow_import_as_one_error_line(tmp_path, capsys):
    checkout = _v1_checkout(tmp_path, "exec sleep 5")
    v1 = str(ROOT / "configs" / "mlgym-v1" / "rl_2gpu.toml")
    assert main(["rehearse", "--config", v1, "--prime-rl", str(checkout), "--timeout", "1"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("air: error: waited 1 s for") and len(err.strip().splitlines()) == 1
    assert "Traceback" not in err
