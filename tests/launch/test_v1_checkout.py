"""Opt-in: configs/mlgym-v1 against today's prime-rl's own config models (its `rl --dry-run`, which
resolves air_mlgym's taskset and env from the installed plugin), and the env-server config against its
EnvServerConfig. Needs a checkout: AIR_TEST_PRIME_RL_V1_DIR=DIR after
`bash scripts/install_prime_rl.sh --orchestrator-only --commit 559b447 DIR`; skips cleanly without."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from air.launch.prime_rl import cpu_venv
from rigs.patience import backstop
from tests.conftest import unavailable
from tests.opt_in import prime_rl_v1_checkout

ROOT = Path(__file__).resolve().parents[2]
V1_DIR = ROOT / "configs" / "mlgym-v1"


@pytest.fixture(scope="module")
def python() -> Path:
    checkout = prime_rl_v1_checkout()
    if checkout is None:
        unavailable("the v1 checkout's checks", "no v1 prime-rl checkout: set AIR_TEST_PRIME_RL_V1_DIR "
                    "(install_prime_rl.sh --orchestrator-only --commit 559b447 DIR)")  # fmt: skip
    return cpu_venv(checkout) / "bin" / "python"


def _dry_run(python: Path, config: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    command = [str(python), "-m", "prime_rl.entrypoints.rl", "@", str(config), "--dry-run"]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=cwd)


@pytest.mark.parametrize("name", ["rl.toml", "rl_debug.toml", "rl_2gpu.toml"])
def test_prime_rl_accepts_the_v1_config(python: Path, name: str, tmp_path: Path) -> None:
    done = _dry_run(python, V1_DIR / name, tmp_path)
    assert done.returncode == 0 and "Dry run complete" in done.stdout + done.stderr, done.stdout[-3000:] + done.stderr
    written = list(tmp_path.rglob("configs/*"))
    assert written, "rl --dry-run writes the per-process configs"


def test_prime_rl_rejects_a_misspelt_taskset_key(python: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken.toml"
    broken.write_text((V1_DIR / "rl_2gpu.toml").read_text().replace("max_turns = 10", "max_turn = 10", 1))
    done = _dry_run(python, broken, tmp_path)
    said = done.stdout + done.stderr
    assert done.returncode != 0 and "taskset.max-turn" in said and "Extra inputs are not permitted" in said, said


def test_the_env_server_config_is_prime_rls(python: Path, tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "from prime_rl.configs.env_server import EnvServerConfig\n"
        "from prime_rl.utils.config import cli\n"
        "c = cli(EnvServerConfig, args=['@', sys.argv[1]])\n"
        "print(type(c.env).__name__, type(c.env.taskset).__name__, c.serve.address)\n"
    )
    config = V1_DIR / "env-servers" / "lane_merge.toml"
    done = subprocess.run([str(python), "-c", script, str(config)], capture_output=True, text=True,
                          timeout=backstop(300), cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-3:] == ["MLGymV1EnvConfig", "MLGymTasksetConfig", "tcp://127.0.0.1:5000"]


def test_the_slurm_script_starts_the_spreader_from_the_fleet_overlay(python: Path, tmp_path: Path) -> None:
    """`rl @ rl.toml @ slurm.toml @ overlay --dry-run`: prime-rl's own Slurm script runs the overlay's
    pre_run_command (the spreader as a step on the orchestrator's node) and the source connects to it. (Its name
    holds no "prime" + "_rl": the tmp path would, and the overlay refuses paths prime-rl's clean-up kills.)"""
    import json
    import tomllib

    from air.fleet.folder import FleetFolder
    from air.fleet.overlay import write_overlay

    overlay = write_overlay(FleetFolder(tmp_path / "fleet"), V1_DIR / "rl_debug.toml", "mlgym-titanic", 5951)
    slurm = tmp_path / "slurm.toml"
    slurm.write_text('[slurm]\njob_name = "air-fleet-check"\n')
    command = [str(python), "-m", "prime_rl.entrypoints.rl", "@", str(V1_DIR / "rl_debug.toml"), "@", str(slurm)]
    done = subprocess.run([*command, "@", str(overlay), "--dry-run"], capture_output=True, text=True, timeout=600,
                          cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (script,) = tmp_path.rglob("rl.sbatch")
    expected = tomllib.loads(overlay.read_text())["slurm"]["pre_run_command"]
    assert expected in script.read_text() and "fleet spread" in expected
    (config,) = tmp_path.rglob("configs/rl.json")
    sources = json.loads(config.read_text())["orchestrator"]["train"]["source"]
    assert [s["serve"]["address"] for s in sources if s["name"] == "mlgym-titanic"] == ["tcp://127.0.0.1:5951"]
