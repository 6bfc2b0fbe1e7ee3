"""The merged state of one row (or of the static row): liveness, deletions and cells, tombstones kept.

A row holds only what is not shadowed: whenever a deletion grows, everything it deletes (timestamp <= the
deletion's) is dropped, and whatever arrives later already shadowed is never stored. (In the store, a row
under a partition or range deletion is shadowed when it is read; see state.store.transaction.) Because
deletions only grow, "keep a version iff it wins its key and no deletion covering it is >= it" gives the
same state for any order and any repetition of the same updates.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from state.cell_merge import (
    EXPIRING,
    NO_DELETION_TIME,
    TOMBSTONE,
    Cell,
    Deletion,
    Liveness,
    cell_from_record,
    compare_cells,
    deletion_from_record,
    liveness_from_record,
    liveness_supersedes,
)
from state.counter_merge import canonical_counter_cell, reconcile_counter
from state.table_layout import ColumnLayout

#: below every timestamp: "nothing is deleted"
NO_FLOOR = -(2**64)
#: a tombstone or expiring cell (anything else is a plain live cell)
DYING_FLAGS = TOMBSTONE | EXPIRING


@dataclass(slots=True)
class RowState:
    """One row: ``cells`` by column name; ``complex_cells`` by column, then element key (see ColumnLayout)."""

    clustering: tuple[bytes | None, ...]
    liveness: Liveness | None = None
    deletion: Deletion | None = None
    cells: dict[str, Cell] = field(default_factory=dict)
    complex_cells: dict[str, dict[bytes, Cell]] = field(default_factory=dict)
    complex_deletions: dict[str, Deletion] = field(default_factory=dict)

    def is_empty(self) -> bool:
        return (
            self.liveness is None
            and self.deletion is None
            and not self.cells
            and not self.complex_cells
            and not self.complex_deletions
        )

    # -- merging

    def merge(
        self,
        record: dict[str, Any],
        outer: Deletion | None,
        columns: dict[str, ColumnLayout],
        counter_event: bool,
    ) -> int | None:
        """Merge one raw-event row record under ``outer`` (partition/range deletion covering the row).

        Returns None when the stored row did not change, else the newest timestamp among the record's
        parts that were kept (a cell that lost to a newer version does not count): the time of the write
        that changed the row, which its change event carries.
        """
        changed = False
        newest = NO_FLOOR
        deletion = deletion_from_record(record["deletion"])
        if (
            deletion is not None
            and (outer is None or deletion > outer)
            and (self.deletion is None or deletion > self.deletion)
        ):
            self.deletion = deletion
            self.shadow(deletion, keep_row_deletion=True)
            changed = True
            newest = deletion.timestamp
        effective = (
            self.deletion if outer is None or (self.deletion is not None and self.deletion > outer) else outer
        )
        floor = effective.timestamp if effective is not None else NO_FLOOR

        liveness = liveness_from_record(record["liveness"])
        if (
            liveness is not None
            and liveness.timestamp > floor
            and (self.liveness is None or liveness_supersedes(liveness, self.liveness))
        ):
            self.liveness = liveness
            changed = True
            if liveness.timestamp > newest:
                newest = liveness.timestamp

        for item in record["complex_deletions"]:
            complex_deletion = deletion_from_record(item["deletion"])
            if complex_deletion is None or (effective is not None and complex_deletion <= effective):
                continue
            name = item["column"]
            known = self.complex_deletions.get(name)
            if known is None or complex_deletion > known:
                self.complex_deletions[name] = complex_deletion
                elements = self.complex_cells.get(name)
                if elements:
                    self._drop_elements(name, elements, complex_deletion.timestamp)
                changed = True
                if complex_deletion.timestamp > newest:
                    newest = complex_deletion.timestamp

        cells = self.cells
        for item in record["cells"]:
            timestamp = item["timestamp"]
            if timestamp <= floor:
                continue
            name = item["column"]
            column = columns.get(name)
            flags = item["flags"] & DYING_FLAGS
            path = item["path"]
            if flags:
                cell = cell_from_record(item)
            else:  # the common live cell, built without the general constructor's branches
                cell = Cell(timestamp, 0, NO_DELETION_TIME, 0, item["value"], path)
            if path is None:
                existing = cells.get(name)
                if column.is_counter if column is not None else counter_event:
                    if not cell.flags & TOMBSTONE:
                        cell = canonical_counter_cell(cell)
                    if existing is not None:
                        cell = reconcile_counter(existing, cell)
                    if cell != existing:
                        cells[name] = cell
                        changed = True
                        if timestamp > newest:
                            newest = timestamp
                elif existing is None or compare_cells(cell, existing) > 0:
                    cells[name] = cell
                    changed = True
                    if timestamp > newest:
                        newest = timestamp
                continue
            complex_deletion = self.complex_deletions.get(name)
            if complex_deletion is not None and cell.timestamp <= complex_deletion.timestamp:
                continue
            key = column.path_key(path) if column is not None and column.path_key is not None else path
            elements = self.complex_cells.get(name)
            if elements is None:
                self.complex_cells[name] = {key: cell}
                changed = True
                if timestamp > newest:
                    newest = timestamp
                continue
            existing = elements.get(key)
            if existing is None or compare_cells(cell, existing) > 0:
                elements[key] = cell
                changed = True
                if timestamp > newest:
                    newest = timestamp
        return newest if changed else None

    def _drop_elements(self, name: str, elements: dict[bytes, Cell], timestamp: int) -> bool:
        doomed = [k for k, c in elements.items() if c.timestamp <= timestamp]
        for k in doomed:
            del elements[k]
        if not elements:
            del self.complex_cells[name]
        return bool(doomed)

    def shadow(self, deletion: Deletion, *, keep_row_deletion: bool = False) -> bool:
        """Drop everything ``deletion`` deletes; the row deletion too unless it is the row's own."""
        changed = False
        ts = deletion.timestamp
        if not keep_row_deletion and self.deletion is not None and self.deletion <= deletion:
            self.deletion = None
            changed = True
        if self.liveness is not None and self.liveness.timestamp <= ts:
            self.liveness = None
            changed = True
        if self.complex_deletions:
            doomed = [n for n, d in self.complex_deletions.items() if d <= deletion]
            for n in doomed:
                del self.complex_deletions[n]
            changed = changed or bool(doomed)
        if self.cells:
            doomed = [n for n, c in self.cells.items() if c.timestamp <= ts]
            for n in doomed:
                del self.cells[n]
            changed = changed or bool(doomed)
        for name, elements in list(self.complex_cells.items()):
            changed = self._drop_elements(name, elements, ts) or changed
        return changed

    # -- time

    def purge(self, gc_before: int) -> int:
        """Drop tombstones and dead (expired) data whose local deletion time is before ``gc_before``.

        Returns how many items went. Nothing live is dropped, so no image changes.
        """
        dropped = 0
        if self.deletion is not None and self.deletion.local_deletion_time < gc_before:
            self.deletion = None
            dropped += 1
        if self.liveness is not None:
            when = self.liveness.purge_time()
            if when is not None and when < gc_before:
                self.liveness = None
                dropped += 1
        for name in [n for n, d in self.complex_deletions.items() if d.local_deletion_time < gc_before]:
            del self.complex_deletions[name]
            dropped += 1
        for name in [n for n, c in self.cells.items() if _purgeable(c, gc_before)]:
            del self.cells[name]
            dropped += 1
        for name, elements in list(self.complex_cells.items()):
            doomed = [k for k, c in elements.items() if _purgeable(c, gc_before)]
            for k in doomed:
                del elements[k]
            dropped += len(doomed)
            if not elements:
                del self.complex_cells[name]
        return dropped

    def next_expiry(self, now_s: int) -> int | None:
        """The earliest time after ``now_s`` at which a live cell or the live liveness expires."""
        best: int | None = None
        if self.liveness is not None:
            when = self.liveness.expires_at()
            if when is not None and when > now_s:
                best = when
        for cell in self._all_cells():
            when = cell.expires_at()
            if when is not None and when > now_s and (best is None or when < best):
                best = when
        return best

    def _all_cells(self) -> list[Cell]:
        out = list(self.cells.values())
        for elements in self.complex_cells.values():
            out.extend(elements.values())
        return out


def _purgeable(cell: Cell, gc_before: int) -> bool:
    when = cell.purge_time()
    return when is not None and when < gc_before
