"""prime-rl's real orchestrator driven on this machine against the scripted vLLM-like server."""
