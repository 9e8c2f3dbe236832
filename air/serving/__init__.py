"""Serving a policy over an OpenAI-compatible HTTP API, answering as vLLM does: the scripted policies,
the tiny model and SmolLM2 (a transformers runtime with a batcher), with token ids and logprobs."""
