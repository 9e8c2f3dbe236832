"""The errors of the sandbox layer: one tree, so callers catch ``SandboxError`` or a leaf."""

from __future__ import annotations


class SandboxError(RuntimeError):
    """Base of the sandbox's errors."""


class SandboxDied(SandboxError):
    """The container or its shell is gone; the sandbox cannot be used any more."""


class SandboxStartError(SandboxError):
    """A container could not be created or its shell did not come up."""
