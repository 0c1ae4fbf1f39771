"""Progress on stderr: a bar redrawn in place on a terminal, one plain line per step anywhere else (CI logs)."""

from __future__ import annotations

import shutil
import sys
import time
from typing import TextIO

__all__ = ["Progress"]


class Progress:
    def __init__(self, total: int, stream: TextIO | None = None, tty: bool | None = None, width: int = 28) -> None:
        self.total = max(total, 0)
        self.done = 0
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.width = width
        self.started = time.monotonic()
        self._drawn = False

    def _columns(self) -> int:
        return shutil.get_terminal_size((100, 20)).columns

    def _eta(self) -> str:
        if not self.done or self.done >= self.total:
            return ""
        per_step = (time.monotonic() - self.started) / self.done
        return f" eta {per_step * (self.total - self.done):.0f}s"

    def step(self, label: str, detail: str = "") -> None:
        """One item finished (measured, skipped or failed)."""
        self.done += 1
        counter = f"[{self.done:>{len(str(self.total))}}/{self.total}]"
        if self.tty:
            filled = self.width * self.done // self.total if self.total else self.width
            bar = "#" * filled + "-" * (self.width - filled)
            line = f"{bar} {counter} {label}{self._eta()}"
            self.stream.write("\r" + line[: self._columns() - 1].ljust(self._columns() - 1))
            self._drawn = True
        else:
            self.stream.write(f"{counter} {label}{'  ' + detail if detail else ''}\n")
        self.stream.flush()

    def note(self, message: str) -> None:
        """A message that must stay readable: printed on its own line, the bar redrawn below it."""
        if self.tty and self._drawn:
            self.stream.write("\r" + " " * (self._columns() - 1) + "\r")
            self._drawn = False
        self.stream.write(message + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty and self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False
