"""The shipped prime-rl configs: prime-rl's schema, the cross-field rules, the layouts the README
promises; and the checker itself on broken files (misspelt keys, shared GPUs, bad env args)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import jsonschema
import pytest
import verifiers as vf

from air.env.settings import parse_env_settings
from air.launch.config_files import load_config
from air.launch.config_rules import check_config_files, env_entries, gpu_sets, seq_lens
from air.launch.config_schema import SCHEMA_PATH

ROOT = Path(__file__).resolve().parents[2]
CONFIG_DIR = ROOT / "configs" / "mlgym"
SHIPPED = sorted(CONFIG_DIR.glob("*.toml"))
RL_FILES = ["rl.toml", "rl_debug.toml", "rl_full.toml", "rl_2gpu.toml", "rl_cpu.toml"]
SPLIT = {"orch.toml": "OrchestratorConfig", "train.toml": "RLTrainerConfig", "infer.toml": "InferenceConfig"}
REFERENCE_SCHEMA = ROOT.parent / "shared" / "prime-rl" / "rlconfig-c87c19b.schema.json"
FOUR_TASKS = ["titanic", "prisonersDilemma", "imageClassificationFMnist", "regressionKaggleHousePrice"]


def read(name: str) -> dict:
    return tomllib.loads((CONFIG_DIR / name).read_text())


def env_tables(data: dict) -> list[dict]:
    return data["orchestrator"]["env"] if "orchestrator" in data else data["env"]


def test_every_config_the_readme_promises_is_shipped():
    assert sorted(p.name for p in SHIPPED) == sorted(RL_FILES + list(SPLIT))


# --------------------------------------------------------------------------- prime-rl's schema


@pytest.fixture(scope="module")
def reference_schema() -> dict:
    if not REFERENCE_SCHEMA.is_file():
        pytest.skip(f"no reference schema at {REFERENCE_SCHEMA} (only the project's development machines have it)")
    return json.loads(REFERENCE_SCHEMA.read_text())


@pytest.mark.parametrize("name", [p.name for p in SHIPPED])
def test_shipped_config_satisfies_prime_rl_schema(name, reference_schema):
    schema = reference_schema
    if name in SPLIT:
        schema = {"$defs": reference_schema["$defs"], "$ref": f"#/$defs/{SPLIT[name]}"}
    errors = [
        f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
        for e in jsonschema.Draft202012Validator(schema).iter_errors(read(name))
    ]
    assert errors == []


def test_packaged_schema_is_the_reference_schema(reference_schema):
    assert json.loads(SCHEMA_PATH.read_text()) == reference_schema


# --------------------------------------------------------------------------- what the schema cannot say


@pytest.mark.parametrize("name", RL_FILES + list(SPLIT))
def test_shipped_config_passes_the_checker(name):
    report = check_config_files([CONFIG_DIR / name])
    assert [str(p) for p in report.problems] == []


@pytest.mark.parametrize("name", RL_FILES)
def test_rl_config_cross_field_rules(name):
    data = read(name)
    orch = data["orchestrator"]
    assert orch["batch_size"] % orch["rollouts_per_example"] == 0
    trainer_len = data.get("seq_len") or data["trainer"]["model"]["seq_len"]
    orch_len = data.get("seq_len") or orch["seq_len"]
    assert trainer_len >= orch_len
    envs = env_tables(data)
    names = [e.get("name") or e["id"] for e in envs]
    assert len(names) == len(set(names))
    gpus = {"inference": set(data["inference_gpu_ids"]), "trainer": set(data["trainer_gpu_ids"])}
    env_gpus = {int(g) for e in envs if e["args"].get("env_gpu") for g in str(e["args"]["env_gpu"]).split(",")}
    assert not gpus["inference"] & gpus["trainer"]
    assert not env_gpus & (gpus["inference"] | gpus["trainer"])
    for env in envs:
        parse_env_settings(env["args"])  # what load_environment accepts


def test_the_split_files_are_the_rl_toml_run():
    rl, orch, train, infer = read("rl.toml"), read("orch.toml"), read("train.toml"), read("infer.toml")
    model = rl["model"]["name"]
    assert orch["model"]["name"] == train["model"]["name"] == infer["model"]["name"] == model
    assert train["model"]["seq_len"] >= orch["seq_len"] == rl["seq_len"]
    assert infer["model"]["max_model_len"] >= orch["seq_len"]
    assert orch["env"] == rl["orchestrator"]["env"]
    for key in ("batch_size", "rollouts_per_example", "trajectory_strategy"):
        assert orch[key] == rl["orchestrator"][key]
    assert orch["max_steps"] == train["max_steps"] == rl["max_steps"]
    lora = rl["trainer"]["model"]["lora"]
    assert train["model"]["lora"] == lora
    assert orch["model"]["lora"]["rank"] == lora["rank"] and orch["model"]["lora"]["alpha"] == lora["alpha"]
    assert orch["model"]["lora"]["name"]  # the adapter the orchestrator loads into vLLM and samples from
    assert infer["enable_lora"] and infer["max_lora_rank"] == lora["rank"]
    assert orch["num_train_workers"] == len(rl["trainer_gpu_ids"])
    assert Path(orch["output_dir"]).parent == Path(train["output_dir"])
    assert check_config_files([CONFIG_DIR / n for n in SPLIT]).problems == []


def test_rl_toml_is_the_eight_gpu_multi_task_run():
    data = read("rl.toml")
    assert data["inference_gpu_ids"] == [0] and data["trainer_gpu_ids"] == [2, 3, 4, 5, 6]
    assert data["model"]["name"] == "Qwen/Qwen3-4B-Instruct-2507"
    assert data["trainer"]["model"]["lora"] == {"rank": 16, "alpha": 32}
    assert data["trainer"]["optim"]["lr"] == pytest.approx(1e-5)
    assert data["orchestrator"]["trajectory_strategy"] == "branching"
    envs = env_tables(data)
    assert [t for e in envs for t in e["args"]["task_configs"]] == FOUR_TASKS
    assert {e["args"]["env_gpu"] for e in envs} == {"7"}
    assert data["ckpt"]["interval"] and data["wandb"]["project"]
    assert "inference" in data  # without it `rl` starts no vLLM


def test_rl_debug_toml():
    data = read("rl_debug.toml")
    orch = data["orchestrator"]
    assert data["max_steps"] == 10 and data["seq_len"] == 4096 and data["ckpt"]["interval"] == 5
    assert orch["batch_size"] == 8 and orch["rollouts_per_example"] == 4
    (env,) = env_tables(data)
    assert env["args"]["task_configs"] == ["titanic"]
    assert env["args"]["max_turns"] == 10 and env["args"]["num_examples_per_task"] == 10


def test_rl_full_toml():
    data = read("rl_full.toml")
    orch = data["orchestrator"]
    assert data["max_steps"] == 200 and data["seq_len"] == 8192 and data["ckpt"]["interval"] == 20
    assert orch["batch_size"] == 32 and orch["rollouts_per_example"] == 8
    envs = env_tables(data)
    assert [t for e in envs for t in e["args"]["task_configs"]] == FOUR_TASKS
    assert {e["args"]["max_turns"] for e in envs} == {50}


def test_two_gpu_layout_uses_built_in_tasks_and_loads_through_verifiers(monkeypatch):
    monkeypatch.setenv("MLGYM_ROOT", "/nonexistent/mlgym")  # the config must not depend on it
    config = load_config(CONFIG_DIR / "rl_2gpu.toml")
    assert gpu_sets(config) == {"inference": (0,), "trainer": (1,)}
    for entry in env_entries(config):
        env = vf.load_environment(entry.id, **entry.args)  # as prime-rl's orchestrator calls it
        assert len(env.get_dataset()) == entry.args["num_examples_per_task"]


# --------------------------------------------------------------------------- the checker on broken files


def write(tmp_path: Path, text: str, name: str = "run.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


BASE = """\
inference_gpu_ids = [0]
trainer_gpu_ids = [1]
seq_len = 2048
[model]
name = "m"
[orchestrator]
batch_size = 8
rollouts_per_example = 4
[[orchestrator.env]]
id = "air_mlgym"
name = "a"
args = { task_configs = ["laneMerge"] }
[inference]
"""


def problems_of(path: Path) -> list[str]:
    return [str(p) for p in check_config_files([path]).problems]


def test_the_base_of_these_cases_is_clean(tmp_path):
    assert problems_of(write(tmp_path, BASE + "[trainer]\n")) == []


def test_misspelled_key_is_named_with_its_fix(tmp_path):
    path = write(tmp_path, BASE.replace("rollouts_per_example", "rollout_per_example") + "[trainer]\n")
    found = check_config_files([path]).problems
    typo = next(p for p in found if p.key == "orchestrator.rollout_per_example")
    assert "unknown key" in typo.message and "rollouts_per_example" in typo.message
    assert typo.fix == "rename it to 'rollouts_per_example'"
    assert str(path) in str(typo)


def test_misspelled_nested_key_in_an_optional_table(tmp_path):
    path = write(tmp_path, BASE + "gpu_memory_utilisation = 0.5\n[trainer.model.lora]\nrnak = 8\n")
    found = problems_of(path)
    assert any(
        "inference.gpu_memory_utilisation: unknown key (did you mean 'gpu_memory_utilization'?)" in p for p in found
    )
    assert any("trainer.model.lora.rnak: unknown key (did you mean 'rank'?)" in p for p in found)


def test_wrong_type_and_enum_are_named(tmp_path):
    text = BASE.replace("batch_size = 8", 'batch_size = "eight"\ntrajectory_strategy = "branchy"') + "[trainer]\n"
    found = problems_of(write(tmp_path, text))
    assert any("orchestrator.batch_size" in p and "integer" in p for p in found)
    assert any("orchestrator.trajectory_strategy" in p and "'branching'" in p for p in found)


def test_overlapping_gpus_are_named(tmp_path):
    text = BASE.replace("trainer_gpu_ids = [1]", "trainer_gpu_ids = [0, 1, 2]").replace(
        '"laneMerge"] }', '"laneMerge"], env_gpu = "2,3" }'
    )
    found = problems_of(write(tmp_path, text + "[trainer]\n"))
    assert any("GPU 0 assigned to both inference (0) and trainer (0,1,2)" in p for p in found)
    assert any("GPU 2 assigned to both trainer (0,1,2) and env a (2,3)" in p for p in found)


def test_envs_may_share_a_container_gpu(tmp_path):
    env_b = (
        '[[orchestrator.env]]\nid = "air_mlgym"\nname = "b"\nargs = { task_configs = ["loanDefault"], env_gpu = "3" }\n'
    )
    text = BASE.replace('"laneMerge"] }', '"laneMerge"], env_gpu = "3" }') + env_b + "[trainer]\n"
    assert problems_of(write(tmp_path, text)) == []


def test_batch_seq_len_names_and_env_args(tmp_path):
    text = (
        BASE.replace("batch_size = 8", "batch_size = 10\nseq_len = 4096")
        .replace("seq_len = 2048\n", "")
        .replace('args = { task_configs = ["laneMerge"] }', 'args = { task_configs = ["laneMerge"], max_turn = 3 }')
        + '[[orchestrator.env]]\nid = "air_mlgym"\nname = "a"\n'
        + "[trainer.model]\nseq_len = 1024\n"
    )
    found = problems_of(write(tmp_path, text))
    assert any(
        "orchestrator.batch_size: 10 is not divisible by orchestrator.rollouts_per_example = 4" in p for p in found
    )
    assert any("trainer.model.seq_len: 1024 is shorter than orchestrator.seq_len (4096)" in p for p in found)
    assert any("orchestrator.env[1].name: env name 'a' is used twice" in p for p in found)
    assert any("orchestrator.env[0].args.max_turn: unknown argument (did you mean 'max_turns'?)" in p for p in found)


def test_unreadable_files_are_problems_not_crashes(tmp_path):
    bad = write(tmp_path, "[orchestrator\nbatch_size = 8\n")
    missing = tmp_path / "nope.toml"
    found = problems_of(bad) + problems_of(missing)
    assert any(str(bad) in p and "not valid TOML" in p and "line 1" in p for p in found)
    assert any(str(missing) in p and "no such file" in p for p in found)


def test_toml_files_are_followed_and_cycles_reported(tmp_path):
    write(tmp_path, BASE + "[trainer]\n", "base.toml")
    top = write(tmp_path, 'toml_files = ["base.toml"]\n[orchestrator]\nbatch_size = 12\n', "top.toml")
    config = load_config(top)
    assert config.data["orchestrator"]["batch_size"] == 12 and config.data["model"]["name"] == "m"
    assert problems_of(top) == []
    write(tmp_path, 'toml_files = ["b.toml"]\n', "a.toml")
    write(tmp_path, 'toml_files = ["a.toml"]\n', "b.toml")
    assert any("includes itself" in p for p in problems_of(tmp_path / "a.toml"))


def test_split_files_with_a_short_trainer_are_caught(tmp_path):
    orch = write(tmp_path, (CONFIG_DIR / "orch.toml").read_text(), "orch.toml")
    train = write(
        tmp_path, (CONFIG_DIR / "train.toml").read_text().replace("seq_len = 8192", "seq_len = 2048"), "train.toml"
    )
    report = check_config_files([orch, train])
    assert [c.kind for c in report.configs] == ["orchestrator", "trainer"]
    assert any("2048 is shorter than" in str(p) and "8192" in str(p) for p in report.problems)
    assert seq_lens(report.configs[1]) == (2048, None)


def _flat_keys(table: dict, prefix: str = "") -> set[str]:
    keys = set()
    for key, value in table.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict):
            keys |= _flat_keys(value, dotted + ".")
        else:  # arrays of tables ([[orchestrator.env]]) are documented as one key
            keys.add(dotted)
    return keys


def test_readme_config_reference_matches_the_schema_and_the_shipped_configs():
    from air.launch.config_schema import schema_default

    readme = (ROOT / "README.md").read_text()
    section = readme.split("### Config reference", 1)[1].split("\n## ", 1)[0]
    documented = set()
    for line in section.splitlines():
        if line.startswith("| `"):
            first_cell = line.split("|")[1]
            documented |= {part.strip(" `") for part in first_cell.split(",")}
    for key in documented:
        schema_default(key)  # raises KeyError for a key prime-rl does not have
    used = set().union(*(_flat_keys(read(name)) for name in RL_FILES))
    assert used - documented == set()
