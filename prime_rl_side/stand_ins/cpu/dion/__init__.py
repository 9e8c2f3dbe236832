"""Import-only stand-in for dion (see ../README.md): `Muon` and every other name raise when used, so
prime-rl's optimizer module imports on a CPU machine; AdamW, which the rehearsal trains with, is torch's."""


class Muon:
    def __init__(self, *args, **kwargs):
        raise NotImplementedError("dion.Muon is not installed; this is the CPU rehearsal's stand-in")


def __getattr__(name: str):
    def unavailable(*args, **kwargs):
        raise NotImplementedError(f"dion.{name} is not installed; this is the CPU rehearsal's stand-in")

    return unavailable
