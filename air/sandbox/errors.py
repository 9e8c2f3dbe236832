"""The errors of the sandbox layer: one tree, so callers catch ``SandboxError`` or a leaf."""

from __future__ import annotations


class SandboxError(RuntimeError):
    """Base of the sandbox's errors."""


class SandboxDied(SandboxError):
    """The container or its shell is gone; the sandbox cannot be used any more."""


class SandboxStartError(SandboxError):
    """A container could not be created or its shell did not come up."""


class SandboxImageMissing(SandboxStartError):
    """The sandbox image does not exist. Every container would fail the same way, so a run stops at the
    first one with this error (naming ``uv run air build-image``) instead of failing each rollout."""


def image_missing(image: str) -> SandboxImageMissing:
    return SandboxImageMissing(
        f"sandbox image {image!r} is missing: build it with `uv run air build-image` "
        "(or name an image that exists with the env's `image` argument or $AIR_IMAGE)"
    )
