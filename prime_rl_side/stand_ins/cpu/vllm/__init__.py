"""Import-only stand-in for the two vLLM classes today's prime-rl imports at load (see ../README.md)."""

__version__ = "0.0.0+cpu-stand-in"
