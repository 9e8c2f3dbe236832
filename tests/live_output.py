"""A child's output read line by line as it comes, for tests that act on a line the moment it appears."""

from __future__ import annotations

import queue
import subprocess
import threading


def lines_as_they_come(process: subprocess.Popen) -> queue.Queue:
    """A queue of ``process``'s stdout lines (text mode, newline stripped), then None at its end; read by a
    daemon thread so the test can wait on the queue with a bound of its own."""
    lines: queue.Queue = queue.Queue()

    def read() -> None:
        for line in process.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    return lines
