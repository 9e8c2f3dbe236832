"""Import-only stand-in (see ../README.md)."""

from flash_attn import __getattr__  # noqa: F401  (every name raises when called)
