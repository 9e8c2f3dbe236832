"""Serving a policy over an OpenAI- and vLLM-compatible HTTP API on loopback. At the top: the HTTP face
(``server``, ``vllm_api``, ``sampled_api``) answering for the scripted policies or a model, and prime-rl's own
vLLM server started for a model where its venv has one (``prime_rl_vllm``). ``runtime/``: air's transformers
engine, used only where no vLLM is installed; ``models/``: the model folders (tiny model, SmolLM2)."""
