"""How an image build reports progress: quiet, or a rich status line with the last output lines."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    pass


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


# --------------------------------------------------------------------------- progress


class Progress:
    """Receives build progress. The base class ignores everything (silent builds)."""

    def phase(self, text: str) -> None:
        """A stage of the whole job (e.g. 'Running debootstrap')."""

    def step(self, text: str) -> None:
        """A build step header ('Step 3/7 : RUN ...')."""

    def log(self, line: str) -> None:
        """Any other output line (apt, debootstrap, ...)."""

    def close(self) -> None:
        pass


class RichProgress(Progress):
    """Spinner + status line on a terminal (phases and steps printed above it); plain lines otherwise.

    With ``verbose`` every log line is printed too.
    """

    def __init__(self, file: TextIO | None = None, verbose: bool = False) -> None:
        from rich.console import Console

        self.file = file if file is not None else sys.stderr
        self.verbose = verbose
        self.console = Console(file=self.file, highlight=False)
        self.is_tty = self.console.is_terminal
        self._status = None
        self._label = ""

    def _print(self, text: str, style: str | None = None) -> None:
        if self.is_tty:
            self.console.print(text, style=style, markup=False, soft_wrap=True)
        else:
            print(text, file=self.file, flush=True)

    def _set_status(self, text: str) -> None:
        if not self.is_tty:
            return
        from rich.text import Text

        width = max(self.console.width - 4, 20)
        text = text if len(text) <= width else text[: width - 1] + "…"
        if self._status is None:
            self._status = self.console.status(Text(text), spinner="dots")
            self._status.start()
        else:
            self._status.update(Text(text))

    def phase(self, text: str) -> None:
        self._label = text
        self._print(text, style="bold")
        self._set_status(text)

    def step(self, text: str) -> None:
        self._label = text
        self._print(text, style="cyan")
        self._set_status(text)

    def log(self, line: str) -> None:
        if self.verbose:
            self._print(line, style="dim")
        if line.strip():
            self._set_status(f"{self._label[:40]} | {line.strip()}" if self._label else line.strip())

    def close(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None


def as_progress(progress: Progress | bool | None) -> Progress:
    if isinstance(progress, Progress):
        return progress
    return RichProgress() if progress else Progress()
