"""Launching prime-rl's ``rl`` (it trains; this folder does not): its TOML configs checked, the host
preflighted (``air check``), GPUs assigned, the process tree recorded, and what a run left cleaned up."""
