"""The errors of the sandbox layer: one tree, so callers catch ``SandboxError`` or a leaf."""

from __future__ import annotations


class SandboxError(RuntimeError):
    """Base of the sandbox's errors."""


class SandboxDied(SandboxError):
    """The container or its shell is gone; the sandbox cannot be used any more."""


class ShellEnded(SandboxDied):
    """The agent's shell ended (killed, or exec'd away) while its container still runs: a new shell can
    take its place, which the shell itself does for the agent's commands (never a masked rollout)."""


class ShellUnstartable(SandboxError):
    """No shell starts for the agent although its container runs and answers root, every process of the agent
    killed first: something the agent did (its memory, its files) keeps a shell from starting. The agent's
    failure: its rollout ends with the penalty, never masked (not a ``SandboxDied``)."""


class SandboxStartError(SandboxError):
    """A container could not be created or its shell did not come up."""


class SandboxesUnavailable(SandboxError):
    """Every sandbox would fail the same way: a run stops at the first rollout with this error (its message
    names the fix) instead of masking every rollout after it."""


class SandboxImageMissing(SandboxStartError, SandboxesUnavailable):
    """The sandbox image does not exist (``uv run air build-image`` makes it)."""


class EngineUnreachable(SandboxDied):
    """The Docker engine stopped answering (or restarted) under a rollout: its container is lost."""


class EngineAbsent(SandboxStartError, SandboxesUnavailable):
    """No Docker engine answered when the pool opened: said at once (nothing was lost, nothing to wait for).
    Not remembered: the next rollout asks again, so a server started before its engine recovers."""


class EngineGone(SandboxesUnavailable):
    """The Docker engine did not come back within the pool's wait: no rollout can start."""


def image_missing(image: str) -> SandboxImageMissing:
    """The fix depends on whose image it is: `air build-image` builds only this recipe's tag."""
    from air.sandbox.image.recipe import default_image_tag

    ours = default_image_tag()
    if image == ours:
        return SandboxImageMissing(
            f"sandbox image {image!r} is missing: build it with `uv run air build-image` "
            "(or name an image that exists with --image, the env's `image` argument or $AIR_IMAGE)"
        )
    return SandboxImageMissing(
        f"sandbox image {image!r} is missing: get it with `docker pull {image}` where its registry is reachable "
        f"(or `docker load` a saved copy); `uv run air build-image` builds this project's image, {ours!r}, "
        "not this one: to use it, leave out --image, the env's `image` argument and $AIR_IMAGE"
    )
