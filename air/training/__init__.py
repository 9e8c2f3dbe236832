"""Training on GPUs with prime-rl: its TOML configs, the preflight (air check), GPUs, launching rl with its
process tree recorded, and cleaning up what a run left."""
