"""configs/mlgym-v1 (today's prime-rl): the shipped schema of prime-rl 559b447, air_mlgym's taskset keys
checked with its own settings model, the deployment's GPUs, and `air check` naming a config written for
the other generation of prime-rl than the one installed. The same files against prime-rl's own config
models: tests/rehearsal/test_v1_checkout.py (opt-in, with a checkout)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from air.launch.config_files import load_config
from air.launch.config_rules import check_config_files, env_entries, gpu_sets
from air.launch.preflight_checks import check_config
from air.launch.preflight_rows import CheckRow, PreflightContext, PreflightOptions
from rigs.patience import backstop

ROOT = Path(__file__).resolve().parents[2]
V1_DIR = ROOT / "configs" / "mlgym-v1"
CLASSIC_DIR = ROOT / "configs" / "mlgym"
V1_FILES = ["rl.toml", "rl_debug.toml", "rl_2gpu.toml", "rl_cpu.toml"]
V1_ONLY = ["rl_cpu_learn.toml"]  # no classic twin: the learning run of benchmarks/learning.py
SERVER = V1_DIR / "env-servers" / "lane_merge.toml"


def test_the_v1_configs_are_the_classic_runs_on_todays_prime_rl():
    assert sorted(p.name for p in V1_DIR.glob("*.toml")) == sorted(V1_FILES + V1_ONLY)
    assert [p.name for p in (V1_DIR / "env-servers").glob("*.toml")] == ["lane_merge.toml"]
    for name in V1_FILES:
        v1, classic = load_config(V1_DIR / name), load_config(CLASSIC_DIR / name)
        assert (v1.generation, classic.generation) == ("v1", "classic")
        # the same envs with the same arguments, the same batch and group, the same GPU counts
        assert [(e.id, e.name) for e in env_entries(v1)] == [(e.id, e.name) for e in env_entries(classic)]
        for a, b in zip(env_entries(v1), env_entries(classic), strict=True):
            assert a.args == {k: v for k, v in b.args.items() if k not in ("num_examples_per_task",)} | {
                "num_examples_per_task": a.args["num_examples_per_task"]
            }
        assert v1.data["orchestrator"]["batch_size"] == classic.data["orchestrator"]["batch_size"]
        assert v1.data["orchestrator"]["group_size"] == classic.data["orchestrator"]["rollouts_per_example"]
        gpus_v1, gpus_classic = gpu_sets(v1), gpu_sets(classic)
        assert {k: len(v) for k, v in gpus_v1.items()} == {k: len(v) for k, v in gpus_classic.items()}


@pytest.mark.parametrize("name", V1_FILES + V1_ONLY)
def test_a_shipped_v1_config_passes_the_checker(name):
    report = check_config_files([V1_DIR / name])
    assert report.problems == []


def test_the_env_server_config_serves_a_source_of_rl_2gpu_word_for_word():
    server = tomllib.loads((V1_DIR / "env-servers" / "lane_merge.toml").read_text())
    source = tomllib.loads((V1_DIR / "rl_2gpu.toml").read_text())["orchestrator"]["train"]["source"][0]
    assert server["env"]["player"] == source["env"]["player"]
    assert server["env"]["taskset"] == source["env"]["taskset"] | {"run_id": "env-server-lane-merge"}
    assert server["serve"]["address"] == "tcp://127.0.0.1:5000"  # loopback: see the env-server address tests


def _edit(tmp_path: Path, old: str, new: str) -> list:
    path = tmp_path / "rl.toml"
    text = (V1_DIR / "rl_2gpu.toml").read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    return check_config_files([path]).problems


def test_typos_are_named_where_they_are(tmp_path):
    found = _edit(tmp_path, "group_size = 4", "group_sise = 4")
    assert any(p.key == "orchestrator.group_sise" and "did you mean 'group_size'" in p.message for p in found)
    found = _edit(tmp_path, "max_turns = 10", "max_turn = 10")
    assert [p.key for p in found] == ["orchestrator.train.source[0].env.taskset.max_turn"]
    assert "did you mean 'max_turns'" in found[0].message and found[0].fix == "rename it to 'max_turns'"
    found = _edit(tmp_path, 'type = "subprocess"', 'type = "subprocess"\nwhatever = 1')
    assert found == [], "a seat's keys are resolved by prime-rl from the harness: not the static schema's"
    found = _edit(tmp_path, "num_infer_gpus = 1", "num_infer_gpu = 1")
    assert any(p.key == "deployment.num_infer_gpu" for p in found)


def test_batch_group_and_gpus_are_checked(tmp_path):
    found = _edit(tmp_path, "batch_size = 16", "batch_size = 18")
    assert any(p.key == "orchestrator.batch_size" and "not divisible by orchestrator.group_size = 4" in p.message
               for p in found)  # fmt: skip
    found = _edit(tmp_path, 'run_id = "rl-2gpu"', 'run_id = "rl-2gpu"\nenv_gpu = "1"')
    assert any(
        p.key == "deployment.num_train_gpus"
        and "GPU 1 assigned to both trainer (1) and env builtin-lane-merge" in p.message
        for p in found
    ), found
    found = _edit(tmp_path, 'run_id = "rl-2gpu"', 'run_id = "rl-2gpu"\nenv_gpu = "2"')
    assert found == []


def test_generation_is_told_by_the_file_shape(tmp_path):
    path = tmp_path / "x.toml"
    path.write_text("[deployment]\nnum_train_gpus = 1\n")
    assert load_config(path).generation == "v1"
    path.write_text('inference_gpu_ids = [0]\n[[orchestrator.env]]\nid = "air_mlgym"\n')
    assert load_config(path).generation == "classic"


def _fake_checkout(root: Path, generation: str) -> Path:
    (root / "src" / "prime_rl" / "entrypoints").mkdir(parents=True)
    (root / "pyproject.toml").write_text('[project]\nname = "prime-rl"\n')
    if generation == "v1":
        (root / "src" / "prime_rl" / "entrypoints" / "env_server.py").write_text("")
    return root


@pytest.mark.parametrize(
    ("installed", "config"), [("v1", CLASSIC_DIR / "rl_2gpu.toml"), ("classic", V1_DIR / "rl_2gpu.toml")]
)
def test_air_check_names_a_config_for_the_other_prime_rl(tmp_path, installed, config):
    checkout = _fake_checkout(tmp_path / "prime-rl", installed)
    done = subprocess.run(
        [sys.executable, "-m", "air.cli.main", "check", "--config", str(config), "--prime-rl", str(checkout), "--json"],
        capture_output=True, text=True, timeout=backstop(300), cwd=tmp_path,
        env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    rows = [r for r in json.loads(done.stdout) if r["check"] == "prime-rl" and r["status"] == "fail"]
    other = "classic" if installed == "v1" else "v1"
    assert any(f"is a {other} config" in r["detail"] and f"is {installed} prime-rl" in r["detail"] for r in rows), rows
    folder = "configs/mlgym-v1" if installed == "v1" else "configs/mlgym"
    assert any(f"{folder}/rl_2gpu.toml" in r["fix"] for r in rows), rows
    assert done.returncode == 1


def test_the_shipped_v1_schema_is_prime_rls_at_the_commit():
    schema = json.loads((ROOT / "air" / "launch" / "schemas" / "prime_rl_rl_559b447.schema.json").read_text())
    assert "559b447" in schema["$comment"] and schema["additionalProperties"] is False
    assert {"deployment", "orchestrator", "trainer", "inference", "monitors"} <= set(schema["properties"])
    assert '"oneOf":' not in json.dumps(schema)  # written as anyOf: jsonschema cannot pick a default tag
    data = tomllib.loads((V1_DIR / "rl.toml").read_text())
    assert data["deployment"] == {"num_infer_gpus": 1, "num_train_gpus": 5}


# --------------------------------------------------------------------------- env servers' addresses (issue 31)


def _config_rows(path: Path) -> tuple[list[CheckRow], list[CheckRow]]:
    """`air check --config PATH`'s config rows, and its warnings about an env server's address."""
    rows = list(check_config(PreflightContext(PreflightOptions(configs=[path]))))
    return [r for r in rows if r.check == "config"], [r for r in rows if r.check == "env server address"]


def _server_at(tmp_path: Path, address: str) -> Path:
    path = tmp_path / "server.toml"
    text = SERVER.read_text()
    assert 'address = "tcp://127.0.0.1:5000"' in text
    path.write_text(text.replace('address = "tcp://127.0.0.1:5000"', f"address = {address!r}"))
    return path


def test_the_env_server_config_is_checked_as_one_and_binds_loopback():
    config, warned = _config_rows(SERVER)
    assert [(r.status, r.detail) for r in config] == [
        ("pass", "lane_merge.toml (env-server, v1): prime-rl 559b447 schema and cross-field rules")
    ]
    assert warned == []
    assert gpu_sets(load_config(SERVER)) == {}  # it deploys no model: only env_gpu would take a GPU there


def test_the_env_server_config_names_a_typo_where_it_is(tmp_path):
    path = tmp_path / "server.toml"
    path.write_text(SERVER.read_text().replace("max_turns = 10", "max_turn = 10").replace("address =", "adress ="))
    found = {p.key: p for p in check_config_files([path]).problems}
    assert set(found) == {"env.taskset.max_turn", "serve.adress"}, found
    assert "did you mean 'max_turns'" in found["env.taskset.max_turn"].message
    assert found["serve.adress"].fix == "rename it to 'address'"
    path.write_text(SERVER.read_text().replace("[serve]", "[serv]"))
    assert [(p.key, p.message) for p in check_config_files([path]).problems] == [
        ("serv", "unknown key (did you mean 'serve'?)")
    ]


@pytest.mark.parametrize(
    "address",
    ["tcp://127.0.0.1:5000", "tcp://127.3.2.1:5600", "tcp://[::1]:5000", "tcp://localhost:5000", "ipc:///tmp/env.sock"],
)
def test_a_loopback_or_local_bind_is_not_warned_about(tmp_path, address):
    config, warned = _config_rows(_server_at(tmp_path, address))
    assert [r.status for r in config] == ["pass"] and warned == []


@pytest.mark.parametrize(
    "address",
    [
        "tcp://0.0.0.0:5000",
        "tcp://*:5000",
        "tcp://192.168.1.20:5000",
        "tcp://[::]:5000",
        "tcp://env-node.internal:5000",
        "tcp://eth0:5000",
    ],
)
def test_a_bind_beyond_loopback_is_warned_about_with_its_file_and_key(tmp_path, address):
    path = _server_at(tmp_path, address)
    config, warned = _config_rows(path)
    assert [r.status for r in config] == ["pass"]  # a valid file: the warning is about the address alone
    assert [r.status for r in warned] == ["warn"]
    detail, fix = warned[0].detail, warned[0].fix
    assert detail.startswith(f"{path}: serve.address = {address!r} binds the env server beyond loopback."), detail
    assert "authenticates and encrypts nothing" in detail and "environment variables" in detail
    assert "SSH tunnel" in fix and "firewall" in fix and "127.0.0.1" in fix


def _rl_with_lane_merge_served_at(tmp_path: Path, address: str) -> Path:
    """rl_2gpu.toml with its first source (lane-merge) served elsewhere, at ``address``."""
    text = (V1_DIR / "rl_2gpu.toml").read_text()
    second = text.index("[[orchestrator.train.source]]", text.index("[[orchestrator.train.source]]") + 1)
    path = tmp_path / "rl.toml"
    path.write_text(f'{text[:second]}[orchestrator.train.source.serve]\naddress = "{address}"\n\n{text[second:]}')
    return path


def test_a_source_served_beyond_loopback_is_warned_about_in_the_training_config(tmp_path):
    tunnelled = _rl_with_lane_merge_served_at(tmp_path, "tcp://127.0.0.1:5600")
    assert load_config(tunnelled).data["orchestrator"]["train"]["source"][0]["serve"] == {
        "address": "tcp://127.0.0.1:5600"
    }
    assert _config_rows(tunnelled)[1] == []
    config, warned = _config_rows(_rl_with_lane_merge_served_at(tmp_path, "tcp://10.0.0.5:5000"))
    assert [r.status for r in config] == ["pass"] and [r.status for r in warned] == ["warn"]
    assert warned[0].detail.startswith(
        f"{tmp_path / 'rl.toml'}: orchestrator.train.source[0].serve.address = 'tcp://10.0.0.5:5000' points at an "
        "env server listening beyond loopback."
    ), warned[0].detail
    assert _config_rows(V1_DIR / "rl_2gpu.toml")[1] == []  # no address: rl starts the server on loopback
