"""air's own model runtime on transformers (docs/decisions/0018-one-serving-engine.md): the engine that samples
a model's replies with continuous batching, the scorer that gives a scripted reply vLLM's token ids and
logprobs, and the trainer's broadcasts loaded as vLLM loads them. torch only under the ``tiny`` extra."""
