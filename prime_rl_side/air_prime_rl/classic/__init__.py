"""prime-rl c87c19b: the rehearsal's orchestrator entry and its trainer entry."""
