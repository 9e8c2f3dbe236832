"""How long a test waits for something before it gives up: a backstop against a hang, never a measure of speed.

The fast tier runs beside other work: at load 20-30 on 2 cores a subprocess that takes 2 s idle has taken over
120 s (torch's import reading back an evicted page cache), and a container's command waits its turn for a CPU
that several hundred other processes want. So a test's own wait (a subprocess's ``timeout=``, a poll's deadline,
``asyncio.wait_for``, pytest-timeout's mark) is written as what an idle machine needs with room,
``backstop(120)``, and stretched here by ``PATIENCE``: a hang still ends the test, with what was awaited named;
a loaded host only makes it slower. tests/test_patience.py finds a short literal wait that skips this.

A bound the product promises (a hung command is ended after the command timeout it was given) is the product's
parameter, not a wait of the test's, and stays as the test sets it.

``AIR_TEST_PATIENCE`` sets the factor (default 10): 1 finds a hang sooner on an idle machine; more for a host
busier than load 30. It changes how long a hang takes to fail, never whether a working test passes.
"""

from __future__ import annotations

import os

# Seen: ~15x slower CPU-bound work at load 30 on 2 cores; the literal bounds already hold 10x or more over idle.
DEFAULT_PATIENCE = 10.0
# A literal wait at or above this many seconds is a backstop as written (tests/test_patience.py).
FLOOR_S = 600


def _patience() -> float:
    text = os.environ.get("AIR_TEST_PATIENCE", "")
    if not text:
        return DEFAULT_PATIENCE
    try:
        factor = float(text)
    except ValueError:
        raise ValueError(
            f"AIR_TEST_PATIENCE={text!r}: a factor such as 10 (how much longer than idle a wait may be)"
        ) from None
    if factor < 1:
        raise ValueError(f"AIR_TEST_PATIENCE={text!r}: at least 1 (the bounds as written are for an idle machine)")
    return factor


PATIENCE = _patience()


def backstop(seconds: float) -> float:
    """``seconds`` (enough on an idle machine, with room) stretched for a loaded host: how long to wait before
    a test calls what it awaits hung."""
    return seconds * PATIENCE
