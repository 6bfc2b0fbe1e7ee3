"""Errors raised by the commit-log decoder.

Every error names the segment and the offset it concerns, so an operator can find the bytes again.
Errors of the data model itself (a schema, a value, an unknown table id) are ``cassandra_model.errors``;
``DECODE_ERRORS`` names both kinds for the places that count a mutation as undecodable.
"""

from __future__ import annotations

from cassandra_model.errors import LocatedError, UnknownTableError, ValueDecodeError


class CommitLogError(LocatedError):
    """Base of every error the commit-log decoder raises."""


class SegmentFormatError(CommitLogError):
    """The segment's name, header or descriptor cannot be read."""


class UnsupportedSegmentError(CommitLogError):
    """The segment is well formed but uses a version or feature we do not decode (e.g. encryption)."""


class CorruptSectionError(CommitLogError):
    """A sync marker or a compressed section failed its CRC or could not be decompressed."""


class CorruptEntryError(CommitLogError):
    """One entry's length or body CRC failed; reading continues at the next entry or section."""


class MutationDecodeError(CommitLogError):
    """The mutation bytes passed their CRC but do not decode against the known schema."""


class UnknownColumnError(MutationDecodeError):
    """A mutation names a column that the table's schema (current or dropped columns) does not have;
    ``column`` is ``<keyspace>.<table>.<column>``."""

    def __init__(
        self, reason: str, *, segment: str | None = None, offset: int | None = None, column: str = ""
    ) -> None:
        super().__init__(reason, segment=segment, offset=offset)
        self.column = column


# A mutation that cannot be decoded: the decoder's own error, a value that does not decode, a table id not known.
DECODE_ERRORS = (MutationDecodeError, ValueDecodeError, UnknownTableError)

__all__ = [
    "DECODE_ERRORS",
    "CommitLogError",
    "CorruptEntryError",
    "CorruptSectionError",
    "MutationDecodeError",
    "SegmentFormatError",
    "UnknownColumnError",
    "UnknownTableError",
    "UnsupportedSegmentError",
]
