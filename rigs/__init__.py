"""Rigs shared by tests/ and benchmarks/ (a fleet on loopback, synthetic and MLGym-format runs, a live viewer):
tests -> rigs <- benchmarks; rigs imports air only, never tests/ nor benchmarks/."""
