"""Errors raised by the commit-log decoder.

Every error names the segment and the offset it concerns, so an operator can find the bytes again.
"""

from __future__ import annotations


class CommitLogError(Exception):
    """Base of every error the commit-log decoder raises."""

    def __init__(self, reason: str, *, segment: str | None = None, offset: int | None = None) -> None:
        self.reason = reason
        self.segment = segment
        self.offset = offset
        where = []
        if segment is not None:
            where.append(f"segment {segment}")
        if offset is not None:
            where.append(f"offset {offset}")
        super().__init__(f"{', '.join(where)}: {reason}" if where else reason)


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


class UnknownTableError(MutationDecodeError):
    """The mutation targets a table id the schema does not know; counted and reported, never fatal."""

    def __init__(self, table_id: str, *, segment: str | None = None, offset: int | None = None) -> None:
        self.table_id = table_id
        super().__init__(f"unknown table id {table_id}", segment=segment, offset=offset)


class SchemaError(CommitLogError):
    """A table schema (from a node or a CQL file) is missing, malformed or contradictory."""


class ValueDecodeError(MutationDecodeError):
    """A stored value does not decode as its CQL type (raised lazily, when the value is asked for)."""


class UnknownColumnError(MutationDecodeError):
    """A mutation names a column that the table's schema (current or dropped columns) does not have."""
