"""The one error a rehearsal raises: its message names the cause and the fix."""


class RehearsalError(RuntimeError):
    """The rehearsal cannot run or failed."""
