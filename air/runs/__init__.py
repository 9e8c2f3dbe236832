"""The env run on this machine without prime-rl: standalone GRPO steps, replay of a recorded trajectory,
baselines reproduced (demo), and W&B logging of standalone runs."""
