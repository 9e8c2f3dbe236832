"""``python -m air.run_training COMMAND ...``: the seed's spelling of the ``air`` command line."""

import sys

from air.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
