"""prime-rl's real orchestrator (and trainer) driven on this machine, against air's vLLM-like server or, for a
model with prime-rl's trainer, prime-rl's own vLLM."""
