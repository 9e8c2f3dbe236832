"""``air tiny-model DIR``: a tokenizer and a small random causal LM of our own, written offline.

prime-rl needs token ids and logprobs from its inference server, and its orchestrator and trainer load
``model.name`` with ``transformers``. No weights can be downloaded in tests or CI, so this writes a model
directory that stands in for one: a byte-level BPE tokenizer trained on text this project owns (its own
prompts, scripted policies and built-in tasks), a ChatML-style chat template, and a two-layer Llama with
random weights. Everything is seeded: the same project version and seed give the same bytes.

The model knows nothing; it exists so that the scripted server, prime-rl's orchestrator and (on a GPU)
its trainer agree on one vocabulary, and so that logprobs are a real model's (the trainer recomputes
them; with the same weights its importance ratio starts at 1).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import air

MANIFEST = "air-tiny-model.json"
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
EOS_TOKEN = "<|im_end|>"  # ends an assistant turn, as in ChatML: the server appends it on "stop"
PAD_TOKEN = "<|endoftext|>"
# ChatML, the layout Qwen's instruct models use (without their tool extensions). An assistant turn's
# reasoning (the `<think>` block a renderer parsed out of a sampled reply) is rendered back where it was
# sampled, so re-rendering a conversation reproduces the sampled tokens: prime-rl's `default` renderer
# cannot bridge turns, re-renders each prompt, and a template that dropped the reasoning started a new
# branch (a second training sample) at every turn that thought (PROJECT_NOTES, "One sample per rollout").
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['role'] == 'assistant' and message.get('reasoning_content') is not none %}"
    "<think>{{ message['reasoning_content'] }}</think>{% endif %}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% elif message['content'] is not none %}{% for part in message['content'] %}{{ part['text'] }}{% endfor %}"
    "{% endif %}"
    "<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# Files of this package the tokenizer learns from: our words, our commands, our tasks' code.
CORPUS_GLOBS = (
    "env/prompts.py",
    "env/actions.py",
    "policies/scripted.py",
    "tasks/builtin/**/*.py",
    "tasks/builtin/**/*.yaml",
)


class TinyModelError(RuntimeError):
    """The tiny model cannot be written or loaded (missing extra, unusable directory)."""


@dataclass(frozen=True)
class TinyModelSpec:
    """The shape of the model. Small enough that a forward pass over 8k tokens takes well under a second
    on one CPU core; big enough to be a real Llama (grouped-query attention, rotary positions, SwiGLU)."""

    vocab_size: int = 2048
    hidden_size: int = 64
    intermediate_size: int = 128
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    max_positions: int = 32768  # covers any seq_len our configs ask for
    seed: int = 0


def require_extra() -> None:
    """Fail with the fix when the ``tiny`` extra is not installed."""
    missing = []
    for module in ("torch", "transformers", "tokenizers", "safetensors"):
        try:
            __import__(module)
        except ImportError:
            missing.append(module)
    if missing:
        raise TinyModelError(
            f"{', '.join(missing)} not installed: the tiny model needs the `tiny` extra "
            "(uv sync --extra tiny, or pip install 'air-mlgym[tiny]')"
        )


def corpus_files() -> list[Path]:
    root = Path(air.__file__).parent
    files = {path for pattern in CORPUS_GLOBS for path in root.glob(pattern) if path.is_file()}
    return sorted(files, key=lambda path: path.relative_to(root).as_posix())


def corpus_texts() -> list[str]:
    return [path.read_text(encoding="utf-8") for path in corpus_files()]


def train_tokenizer(spec: TinyModelSpec):
    """A byte-level BPE tokenizer (any text encodes; nothing is unknown) wrapped for transformers."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=spec.vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(corpus_texts(), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        chat_template=CHAT_TEMPLATE,
        clean_up_tokenization_spaces=False,  # decode(encode(text)) == text, as the server needs
        model_max_length=spec.max_positions,
    )


def build_model(spec: TinyModelSpec, tokenizer):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.layers,
        num_attention_heads=spec.heads,
        num_key_value_heads=spec.kv_heads,
        max_position_embeddings=spec.max_positions,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=tokenizer.convert_tokens_to_ids(EOS_TOKEN),
        pad_token_id=tokenizer.convert_tokens_to_ids(PAD_TOKEN),
        torch_dtype="float32",
    )
    with torch.random.fork_rng(devices=[]):  # seeded without disturbing the caller's generator
        torch.manual_seed(spec.seed)
        model = LlamaForCausalLM(config)
    return model.eval()


def write_tiny_model(directory: str | Path, spec: TinyModelSpec | None = None, force: bool = False) -> Path:
    """Write the tokenizer, model and a manifest to ``directory``; return its absolute path.

    A directory that already holds a tiny model of the same spec is left as it is (the manifest says so),
    or rewritten when an older version of this project wrote it (another corpus, chat template or library
    version); a non-empty directory holding anything else is refused unless ``force``."""
    require_extra()
    spec = spec or TinyModelSpec()
    target = Path(directory).expanduser().resolve()
    wanted = manifest_for(spec)
    existing = read_manifest(target)
    if existing == wanted:
        return target
    ours_to_refresh = existing is not None and existing.get("spec") == wanted["spec"]
    if target.exists() and any(target.iterdir()) and not force and not ours_to_refresh:
        what = "a tiny model of another spec" if existing else "files that are not a tiny model"
        raise TinyModelError(f"{target} holds {what}; pass --force to overwrite it, or name an empty directory")
    target.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer(spec)
    model = build_model(spec, tokenizer)
    tokenizer.save_pretrained(target)
    model.save_pretrained(target, safe_serialization=True)
    readable_by_older_transformers(target)
    (target / MANIFEST).write_text(json.dumps(wanted, indent=2, sort_keys=True) + "\n")
    return target


def readable_by_older_transformers(target: Path) -> None:
    """The folder as transformers 4.x reads it too, whichever version wrote it: prime-rl c87c19b's
    trainer (transformers 4.57) loads a model a rehearsal wrote from today's prime-rl venv (transformers
    5.x), which names the tokenizer class ``TokenizersBackend`` (unknown to 4.x) and keeps ``rope_theta``
    only inside ``rope_parameters`` (4.x then falls back to its default). Both spellings are kept."""
    tokenizer_config = target / "tokenizer_config.json"
    settings = json.loads(tokenizer_config.read_text())
    if settings.get("tokenizer_class") != "PreTrainedTokenizerFast":
        settings["tokenizer_class"] = "PreTrainedTokenizerFast"
        tokenizer_config.write_text(json.dumps(settings, indent=2, ensure_ascii=False) + "\n")
    model_config = target / "config.json"
    config = json.loads(model_config.read_text())
    theta = (config.get("rope_parameters") or {}).get("rope_theta")
    if theta is not None and "rope_theta" not in config:
        config["rope_theta"] = theta
        model_config.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def manifest_for(spec: TinyModelSpec) -> dict:
    digest = hashlib.sha256()
    for text in corpus_texts():
        digest.update(hashlib.sha256(text.encode()).digest())
    import tokenizers
    import torch
    import transformers

    return {
        "spec": spec.__dict__,
        "corpus_sha256": digest.hexdigest(),
        "chat_template_sha256": hashlib.sha256(CHAT_TEMPLATE.encode()).hexdigest(),
        "versions": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__,
        },
    }


def read_manifest(directory: Path) -> dict | None:
    try:
        return json.loads((directory / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
