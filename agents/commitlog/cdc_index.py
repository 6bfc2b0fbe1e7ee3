"""The ``CommitLog-<v>-<id>_cdc.idx`` file beside a CDC segment (format reference §9).

Cassandra rewrites it (truncate, then write) on every flushing sync: the decimal logical offset up to
which the segment is durable, then ``\\nCOMPLETED`` once the segment is closed. A reader can catch it
empty or half-written, so anything that is a prefix of valid content means "retry", not an error.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from agents.commitlog.errors import SegmentFormatError

COMPLETED = "COMPLETED"

# A complete index: offset, optionally a newline and COMPLETED; tolerate CRLF and trailing whitespace,
# which Cassandra never writes but hand-made or copied files may.
_COMPLETE = re.compile(r"([0-9]+)[ \t]*(?:\r?\n[ \t]*(COMPLETED)?)?\s*", re.ASCII)
_MAX_INDEX_BYTES = 4096


@dataclass(frozen=True, slots=True)
class CdcIndex:
    """A parsed index: the durable logical offset and whether the segment is closed."""

    offset: int
    completed: bool

    @property
    def read_limit(self) -> int | None:
        """The ``limit`` to read the segment with.

        A completed segment is final, so it is read to its end: at startup replay Cassandra writes the
        *file* length as the offset, which for a compressed segment is less than its logical end.
        """
        return None if self.completed else self.offset


def parse_cdc_index(content: str | bytes, *, name: str | None = None) -> CdcIndex | None:
    """Parse index content; ``None`` means empty or half-written (read it again later).

    Content that cannot be a prefix of what Cassandra writes raises SegmentFormatError naming ``name``.
    """
    if isinstance(content, bytes):
        try:
            text = content.decode("ascii")
        except UnicodeDecodeError as exc:
            raise SegmentFormatError(f"CDC index is not ASCII text: {content[:40]!r}", segment=name) from exc
    else:
        text = content
    text = text.lstrip()
    if not text:
        return None
    match = _COMPLETE.fullmatch(text)
    if match is not None:
        return CdcIndex(offset=int(match[1]), completed=match[2] is not None)
    if _is_torn(text):
        return None
    raise SegmentFormatError(
        f"CDC index content is not '<offset>[\\nCOMPLETED]': {text[:40]!r}", segment=name
    )


def read_cdc_index(path: str | os.PathLike[str]) -> CdcIndex | None:
    """Read and parse an index file; a missing, empty or half-written file gives ``None`` (retry)."""
    name = os.path.basename(os.fspath(path))
    try:
        with open(path, "rb") as handle:
            content = handle.read(_MAX_INDEX_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SegmentFormatError(f"cannot read CDC index: {exc}", segment=name) from exc
    if len(content) > _MAX_INDEX_BYTES:
        raise SegmentFormatError(f"CDC index is larger than {_MAX_INDEX_BYTES} bytes", segment=name)
    return parse_cdc_index(content, name=name)


def format_cdc_index(offset: int, completed: bool = False) -> str:
    """The exact text Cassandra writes (no trailing newline), for tests and simulators."""
    return f"{offset}\n{COMPLETED}" if completed else str(offset)


def _is_torn(text: str) -> bool:
    """Whether ``text`` is a strict prefix of ``<digits>\\nCOMPLETED``, i.e. caught mid-write."""
    digits = len(text) - len(text.lstrip("0123456789"))
    if digits == 0:
        return False
    rest = text[digits:]
    if rest.startswith("\r"):
        rest = rest[1:]
    if not rest.startswith("\n"):
        return False
    tail = rest[1:]
    return COMPLETED.startswith(tail) and tail != COMPLETED
