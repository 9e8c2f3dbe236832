"""prime-rl c87c19b (classic): its config planned, its orchestrator run, its batches read back."""
