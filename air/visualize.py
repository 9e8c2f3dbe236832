"""The viewer's entry file, not a shim: the Streamlit script ``air view`` runs (air/viewer/launch.py).

By hand: ``uv run streamlit run air/visualize.py -- --trajectory_dir DIR``.

Streamlit runs this file as ``__main__`` on every page load; the app itself is ``air.viewer.app``.
"""

import sys
from pathlib import Path

# `streamlit run air/visualize.py` puts air/ itself on sys.path, where our package names (tasks,
# env, ...) would shadow real ones. Drop it before anything else is imported.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if not p or Path(p).resolve() != _HERE]

from air.viewer.app import main  # noqa: E402

if __name__ == "__main__":
    main()
