"""Import-only stand-in for wandb (see ../README.md): every name and submodule raises NotImplementedError when
used, except what the trainer calls with W&B off: `finish()` (a no-op when no run was started, as in wandb) and
`run` (None: no run)."""

from _air_stand_in import make_stand_in

run = None


def finish(*args, **kwargs) -> None:
    """No run was started (W&B is off in the rehearsal's trainer config): nothing to finish, as in wandb."""


make_stand_in(__name__)
