"""What one statement writes, cell by cell: the workload's own record of its writes.

The verifier explains every image the pipeline emits with these records (cdc/verify/write_ledger.py): a
value in an image must be one some statement wrote to that row and column, and the image's write time the
timestamp of such a statement. A statement's CQL text alone would not do: it would have to be parsed
back, and a batch, a collection append or a UDT field update each write cells of their own shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cdc.verify.workload.statement import Key

#: the row marker of an INSERT (a row that lives by its primary key alone); ``column`` is None
LIVENESS = "liveness"
#: a whole value (a simple or frozen cell, or a collection or UDT overwritten); None writes a tombstone
SET = "set"
#: elements added to a collection: a list or set of elements, or a dict of map entries
ADD = "add"
#: elements (list, set) or keys (map) removed from a collection
REMOVE = "remove"
#: one field of a non-frozen UDT: ``value`` is (field, field value or None)
FIELD = "field"
#: a deletion: of the column's cells, or (``column`` None) of the row, a range of rows or the partition
DELETE = "delete"
#: a counter increment (negative: a decrement)
DELTA = "delta"

MODES = frozenset({LIVENESS, SET, ADD, REMOVE, FIELD, DELETE, DELTA})


@dataclass(slots=True, frozen=True)
class CellWrite:
    """One column (or the row marker, or a deletion of rows) that one statement wrote.

    ``key`` names the primary-key columns the cells belong to: the whole primary key for a row's cells,
    the partition key alone for static cells and for range or partition deletions."""

    table: str
    key: Key
    column: str | None
    mode: str
    value: Any = None
    ttl: int | None = None

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"unknown write mode {self.mode!r}; choose from {', '.join(sorted(MODES))}")

    def with_ttl(self, ttl: int | None) -> CellWrite:
        """The same write made with ``USING TTL ttl`` (deletions and counters take no TTL)."""
        if ttl is None or self.mode in (DELETE, REMOVE, DELTA):
            return self
        return CellWrite(self.table, self.key, self.column, self.mode, self.value, ttl)
