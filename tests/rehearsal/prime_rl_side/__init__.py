"""Tests of prime_rl_side/: the package air_prime_rl and the import-only stand-ins, which run in prime-rl's venv.
This project's own venv does not install air_prime_rl: conftest.py puts its folder on the path."""

from pathlib import Path

PRIME_RL_SIDE = Path(__file__).resolve().parents[3] / "prime_rl_side"
