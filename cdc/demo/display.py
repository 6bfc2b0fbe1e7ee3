"""The demo's terminal output: scrolling event lines under a progress line that is redrawn in place."""

from __future__ import annotations

import sys
from typing import TextIO


class Display:
    """Event lines scroll; on a terminal one progress line stays below them and is redrawn in place."""

    def __init__(self, out: TextIO = sys.stdout) -> None:
        self.out = out
        self.tty = out.isatty()
        self.status = ""

    def line(self, text: str = "") -> None:
        if self.tty and self.status:
            self.out.write("\r\x1b[K")
        self.out.write(text + "\n")
        if self.tty and self.status:
            self.out.write(self.status)
        self.out.flush()

    def progress(self, text: str) -> None:
        self.status = text
        if self.tty:
            self.out.write("\r\x1b[K" + text)
            self.out.flush()

    def clear(self) -> None:
        if self.tty and self.status:
            self.out.write("\r\x1b[K")
            self.out.flush()
        self.status = ""


def progress_bar(done: int, total: int, width: int = 20) -> str:
    filled = width if total <= 0 else min(width, done * width // total)
    return "[" + "#" * filled + "." * (width - filled) + "]"
