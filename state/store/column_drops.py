"""The rows an ALTER TABLE ... DROP made disappear, found in one partition store.

A row exists while its primary-key liveness or one of its regular cells is live; a row created by
``UPDATE ... SET qty = ?`` lives by its ``qty`` cell alone. Dropping ``qty`` hides those cells, so such a
row is gone from every ``SELECT`` from then on, with no write to the row: no raw event will ever announce
it. The worker's images follow the newest schema, so its state already hides the row; what is left is to
tell consumers, once, with a delete. Rows that keep another live cell change no event: their next change
shows the new schema.

Both sides are read from the stored rows, which still hold the dropped column's cells: ``before`` is the
table with the dropped columns back (``TableSchema.before_drops``), ``after`` the table now. A partition
whose last rows go that way and that keeps live static cells shows its static-only row from then on; a
static-only row that lived by a dropped static column goes. Nothing is written to the store: the rows
keep their cells, hidden, as Cassandra's sstables do until compaction. Pure over the transaction's
reads; one partition at a time, its rows streamed, so a wide table is never held whole.
"""

from __future__ import annotations

from collections.abc import Iterator

from cassandra_model.table_schema import TableSchema
from state.change import RowChange
from state.row_image import ColumnImage, image_of_row, static_columns, static_only_row
from state.store.transaction import StateTransaction
from state.table_layout import layout_for

#: rows read per chunk of changes
CHUNK_ROWS = 1000


def rows_gone_with_drops(
    txn: StateTransaction, before: TableSchema, after: TableSchema, now_s: int
) -> Iterator[list[RowChange]]:
    """The changes the drop made to the table's rows in this store: a delete (``before`` image, no
    ``after``) for each row that existed only by dropped columns, and the static-only rows that appear
    or go, in chunks."""
    if before.table_id != after.table_id:
        raise ValueError(f"{before.name} and {after.name} are not one table")
    old, new = layout_for(before), layout_for(after)
    chunk: list[RowChange] = []
    read = 0
    for partition_key in txn.partition_keys(after.table_id):
        header = txn.header(after, partition_key)
        static_old: dict[str, ColumnImage] = static_columns(header, old, now_s)
        static_new: dict[str, ColumnImage] = static_columns(header, new, now_s)
        any_old = any_new = False
        for key, row, _ in txn.rows(after, partition_key, None):
            read += 1
            shown = header.shadowed(key, row)
            if shown is None:
                continue
            was = image_of_row(partition_key, shown, old, now_s, static_old)
            now = image_of_row(partition_key, shown, new, now_s, static_new)
            any_old = any_old or was is not None
            any_new = any_new or now is not None
            if was is not None and now is None:
                chunk.append(RowChange("d", key, was, None))
            if read % CHUNK_ROWS == 0 and chunk:
                yield chunk
                chunk = []
        only_was = static_only_row(partition_key, old, static_old, any_row=any_old)
        only_now = static_only_row(partition_key, new, static_new, any_row=any_new)
        if only_was is None and only_now is not None:
            chunk.append(RowChange("c", None, None, only_now))
        elif only_was is not None and only_now is None:
            chunk.append(RowChange("d", None, only_was, None))
    if chunk:
        yield chunk
