"""The change of each row that a partition-wide update, or the passing of time, changes without naming it.

A partition deletion or a range deletion hides rows the update does not name, and a change of static
columns changes every row's image, since static columns are part of it. The store writes such updates
to the partition header alone (the rows keep what a covering deletion deletes until the deletion is
purged, see state.store.transaction). So the change of each such row follows from the row as stored and the
header on each side, and can be worked out while the rows stream past: no partition is held whole.

The sweep also records whether any row exists on each side, which decides the static-only row (live
static cells and no row). Pure: no I/O here.
"""

from __future__ import annotations

from dataclasses import dataclass

from state.change import RowChange, diff
from state.partition_state import PartitionState
from state.row_image import ColumnImage, image_of_row, static_only_row
from state.row_state import RowState
from state.table_layout import TableLayout


@dataclass(slots=True)
class PartitionSide:
    """The partition as one side of a change shows it: the header whose partition and range deletions
    cover the rows (its rows are not used), the time of the images, and the live static columns."""

    header: PartitionState
    at_s: int
    static: dict[str, ColumnImage]


class RowSweep:
    """Changes of rows between two sides of the same partition, one row at a time, in any order."""

    __slots__ = ("after", "any_after", "any_before", "before", "layout")

    def __init__(self, layout: TableLayout, before: PartitionSide, after: PartitionSide) -> None:
        self.layout = layout
        self.before = before
        self.after = after
        #: whether some swept row exists on each side
        self.any_before = False
        self.any_after = False

    def change(self, key: bytes, row: RowState) -> RowChange | None:
        """The change of the row stored at ``key``. The row is shadowed in place: afterwards it is the
        row as the after side holds it (deletions only grow from one side to the other)."""
        partition_key = self.before.header.partition_key
        layout = self.layout
        before = after = None
        if self.before.header.shadowed(key, row) is not None:
            before = image_of_row(partition_key, row, layout, self.before.at_s, self.before.static)
        if self.after.header.shadowed(key, row) is not None:
            after = image_of_row(partition_key, row, layout, self.after.at_s, self.after.static)
        if before is not None:
            self.any_before = True
        if after is not None:
            self.any_after = True
        return diff(key, before, after, layout.lists)

    def static_only_change(self, *, other_before: bool, other_after: bool) -> RowChange | None:
        """The static-only row's change, given whether a row not swept exists on each side."""
        partition_key = self.before.header.partition_key
        layout = self.layout
        before = static_only_row(
            partition_key, layout, self.before.static, any_row=self.any_before or other_before
        )
        after = static_only_row(
            partition_key, layout, self.after.static, any_row=self.any_after or other_after
        )
        return diff(None, before, after, layout.lists)
