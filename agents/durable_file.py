"""Replacing a small state file so that a crash leaves either the old or the new content, never a mix."""

from __future__ import annotations

import os
from pathlib import Path


def write_durably(path: Path, text: str) -> None:
    """Write `text` to a temporary file beside `path`, fsync it, rename it over `path`, fsync the folder.

    The folder's fsync makes the rename itself survive a power loss, not only the bytes.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
