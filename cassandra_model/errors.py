"""Errors of the Cassandra data model: schemas that do not hold together and values that do not decode.

They carry the same optional location as the commit-log decoder's errors (segment, offset), because a
value or a table id usually goes wrong while a segment is being read, and the operator needs the bytes.
"""

from __future__ import annotations


class LocatedError(Exception):
    """An error that may name where it happened: the segment and the offset of the bytes concerned."""

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


class ModelError(LocatedError):
    """Base of every error the Cassandra model raises."""


class SchemaError(ModelError):
    """A table schema (from a node or a CQL file) is missing, malformed or contradictory."""


class ValueDecodeError(ModelError):
    """A stored value does not decode as its CQL type (raised lazily, when the value is asked for)."""


class UnknownTableError(ModelError):
    """A table id the schema catalog does not know; counted and reported by readers, never fatal."""

    def __init__(self, table_id: str, *, segment: str | None = None, offset: int | None = None) -> None:
        self.table_id = table_id
        super().__init__(f"unknown table id {table_id}", segment=segment, offset=offset)


class ClusteringValueError(ModelError, ValueError):
    """A clustering or collection-path value whose bytes do not fit its type: it has no place in the order."""
