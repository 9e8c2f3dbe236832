"""Today's prime-rl (559b447, verifiers v1): its config planned, its env servers and orchestrator run, its
batches read back against its episodes."""
