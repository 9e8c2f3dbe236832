"""The seed's spelling of ``air``, kept for its users: ``python -m air.run_training`` takes what ``air`` takes.

Tests and scripts use it too, to run ``air`` under one given interpreter (``sys.executable``), console script or not.
"""

import sys

from air.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
