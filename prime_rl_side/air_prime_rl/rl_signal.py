"""A fixed batch for prime-rl's own trainer, in its own formats: the RL signal guard's prime-rl side.

    python -m air_prime_rl.rl_signal write GENERATION SPEC_JSON OUTPUT_DIR CONFIG_OUT
        GENERATION is ``v1`` (559b447) or ``classic`` (c87c19b). SPEC_JSON holds ``model_dir``, ``device``
        ("cpu" or "cuda"), ``lr`` (null: prime-rl's default) and ``samples``: each ``prompt_ids``,
        ``completion_ids``, ``completion_logprobs`` (under the start weights: the importance ratio starts at
        1) and a scalar ``advantage``. Writes the trainer's config (prime-rl's own defaults, then what the
        rehearsal's trainer entries change to run here, one step) to CONFIG_OUT, and the batch where that
        trainer reads its first step, through prime-rl's own code:

        - v1: ``TrainingSample``s packed by ``prime_rl.trainer.batch.prepare_batch`` (what the orchestrator's
          packer calls) and written by its ``FileSystemMicroBatchSender`` to ``rollouts/step_1/rank_0.bin``;
        - classic: a ``TrainingBatch`` written by its ``FileSystemTrainingBatchSender`` to
          ``run_default/rollouts/step_0/rollouts.bin``, beside the ``control/orch.toml`` its trainer's run
          manager needs to see the run (that trainer packs the batch itself).

Then the trainer runs from its own entry (``air_prime_rl.v1.trainer train`` / ``air_prime_rl.classic.trainer
train``, under ``torch.distributed.run`` as ``rl`` starts it) and publishes ``broadcasts/step_N/``; the host
measures the completions' logprobs before and after (rigs/rl_signal.py). stdlib + torch + prime-rl only.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

ENV_NAME = "rl-signal"


def _v1_config(spec: dict, output_dir: Path, config_out: Path) -> None:
    from prime_rl.configs.trainer import TrainerConfig

    from air_prime_rl.v1.trainer import adapt

    base = TrainerConfig().model_dump(mode="json")  # prime-rl's defaults: its loss, AdamW, constant schedule
    if spec.get("lr") is not None:
        base["optim"]["lr"] = float(spec["lr"])
    overrides = {"model_dir": spec["model_dir"], "output_dir": str(output_dir), "max_steps": 1}
    with tempfile.TemporaryDirectory() as scratch:
        base_json, overrides_json = Path(scratch) / "trainer.json", Path(scratch) / "overrides.json"
        base_json.write_text(json.dumps(base))
        overrides_json.write_text(json.dumps({**overrides, "device": spec.get("device", "cpu")}))
        adapt(str(base_json), str(overrides_json), str(config_out))


def _v1_batch(spec: dict, output_dir: Path, seq_len: int) -> None:
    import asyncio

    from prime_rl.trainer.batch import build_bin_cost, prepare_batch
    from prime_rl.transports.rollouts.filesystem import FileSystemMicroBatchSender
    from prime_rl.transports.rollouts.types import TrainingSample

    samples = []
    for sample in spec["samples"]:
        prompt, completion = list(sample["prompt_ids"]), list(sample["completion_ids"])
        mask = [False] * len(prompt) + [True] * len(completion)
        samples.append(
            TrainingSample(
                token_ids=prompt + completion,
                mask=mask,
                logprobs=[0.0] * len(prompt) + [float(x) for x in sample["completion_logprobs"]],
                temperatures=[1.0] * len(mask),
                env_name=ENV_NAME,
                # the orchestrator broadcasts the rollout's scalar over its sampled tokens
                advantages=[float(sample["advantage"]) if trained else 0.0 for trained in mask],
            )
        )
    grid = prepare_batch(rollouts=samples, seq_len=seq_len, num_train_workers=1, bin_cost=build_bin_cost(None))
    asyncio.run(FileSystemMicroBatchSender(output_dir, 1, current_step=1).send(grid))  # the trainer starts at 1


def _classic_config(spec: dict, output_dir: Path, config_out: Path) -> None:
    import tomli_w
    from prime_rl.trainer.rl.config import RLTrainerConfig

    from air_prime_rl.classic.trainer import CPU_MODEL, CPU_MODEL_DROP

    trainer = RLTrainerConfig().model_dump(exclude_none=True, mode="json")  # prime-rl's defaults
    if spec.get("lr") is not None:
        trainer["optim"]["lr"] = float(spec["lr"])
    model = trainer.setdefault("model", {})
    model.update(name=spec["model_dir"], attn="sdpa")  # what air_prime_rl.classic.trainer.derive changes
    trainer.setdefault("tokenizer", {})["name"] = spec["model_dir"]
    trainer["output_dir"] = str(output_dir)
    trainer["max_steps"] = 1
    for key in ("wandb", "ckpt"):
        trainer.pop(key, None)
    if spec.get("device", "cpu") == "cpu":
        model.update(CPU_MODEL)
        for key in CPU_MODEL_DROP:
            model.pop(key, None)
    RLTrainerConfig.model_validate(trainer)
    config_out.write_text(tomli_w.dumps(trainer))


def _classic_batch(spec: dict, output_dir: Path) -> None:
    import tomli_w
    from prime_rl.orchestrator.config import OrchestratorConfig
    from prime_rl.transport.filesystem import FileSystemTrainingBatchSender
    from prime_rl.transport.types import TrainingBatch, TrainingSample
    from prime_rl.utils.logger import setup_logger

    setup_logger("info")  # the sender logs through prime-rl's logger, as in its orchestrator
    run_dir = output_dir / "run_default"  # the run `rl` starts beside its trainer
    control = run_dir / "control"
    control.mkdir(parents=True, exist_ok=True)
    orchestrator = OrchestratorConfig(model={"name": spec["model_dir"]}, output_dir=run_dir)
    (control / "orch.toml").write_text(tomli_w.dumps(orchestrator.model_dump(exclude_none=True, mode="json")))
    examples = [
        TrainingSample(
            prompt_ids=list(sample["prompt_ids"]),
            prompt_mask=[False] * len(sample["prompt_ids"]),
            completion_ids=list(sample["completion_ids"]),
            completion_mask=[True] * len(sample["completion_ids"]),
            completion_logprobs=[float(x) for x in sample["completion_logprobs"]],
            completion_temperatures=[1.0] * len(sample["completion_ids"]),
            advantage=float(sample["advantage"]),
        )
        for sample in spec["samples"]
    ]
    FileSystemTrainingBatchSender(run_dir).send(TrainingBatch(examples=examples, step=0))


def write(generation: str, spec_json: str, output_dir: str, config_out: str) -> None:
    spec = json.loads(Path(spec_json).read_text())
    out = Path(output_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    if generation == "v1":
        _v1_config(spec, out, Path(config_out))
        seq_len = json.loads(Path(config_out).read_text())["model"]["seq_len"]
        _v1_batch(spec, out, seq_len)
    elif generation == "classic":
        _classic_config(spec, out, Path(config_out))
        _classic_batch(spec, out)
    else:
        raise SystemExit(f"generation must be v1 or classic, not {generation!r}")


if __name__ == "__main__":
    if len(sys.argv) != 6 or sys.argv[1] != "write":
        raise SystemExit(__doc__)
    write(*sys.argv[2:])
