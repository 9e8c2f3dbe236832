"""Import-only stand-in for flash-attn on a CPU machine (see ../README.md): every attribute is a
function that raises, so modules that import it load and any real use fails loudly."""

__version__ = "2.8.3"


def __getattr__(name: str):
    def unavailable(*args, **kwargs):
        raise NotImplementedError(f"flash_attn.{name} needs CUDA; this is the CPU rehearsal's stand-in")

    return unavailable
