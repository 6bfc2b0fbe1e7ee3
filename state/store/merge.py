"""A raw event, or the passing of time, applied to a partition in the store, with the changes it makes.

This is what the worker's merge and expiry do with a StateTransaction. The benchmarks and the store's
property tests drive the same code. Load the header and the rows the update names
(``StateTransaction.load``), apply the update, and save the header and those rows. The other rows it
changes are not loaded or written; their changes stream through ``partition_sweep`` in clustering
order. A partition deletion or a change of static columns changes all of them; a range deletion
changes those inside it.

Both functions are generators. They yield the changes in chunks, one per CHUNK_ROWS rows swept, so a
caller can send them on before the rest of a wide partition is read. They save after the last chunk,
so the sweep reads every row as it was before the update. Drive them to the end, or roll back.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Iterator, Sequence

from cassandra_model.table_schema import TableSchema
from state.change import RowChange, apply_prepared_with_changes, expiry_changes, stamp_write_times
from state.partition_state import ApplyResult, PartitionState, PreparedEvent
from state.partition_sweep import PartitionSide, RowSweep
from state.row_image import row_exists, same_columns, static_columns
from state.row_state import RowState
from state.snapshot_lists import adopt_snapshot_list_paths, drop_known_list_elements
from state.store.transaction import DueExpiry, StateTransaction
from state.table_layout import TableLayout, layout_for

#: rows swept per chunk of changes
CHUNK_ROWS = 1000


def _any_exists(rows: Iterable[RowState], layout: TableLayout, at_s: int) -> bool:
    return any(row_exists(row, layout, at_s) for row in rows)


def _sweep_chunks(
    rows: Iterable[tuple[bytes, RowState, int | None]],
    skip: set[bytes],
    sweep: RowSweep,
    named: list[RowChange],
) -> Iterator[list[RowChange]]:
    """The changes of the stored ``rows`` not in ``skip``, merged in clustering order with ``named`` (the
    changes of the loaded rows, sorted), in chunks; the last one may be empty."""
    chunk: list[RowChange] = []
    i = 0
    swept = 0
    for key, row, _ in rows:
        if key in skip:
            continue
        while i < len(named) and named[i].key < key:  # type: ignore[operator]
            chunk.append(named[i])
            i += 1
        change = sweep.change(key, row)
        if change is not None:
            chunk.append(change)
        swept += 1
        if swept % CHUNK_ROWS == 0 and chunk:
            yield chunk
            chunk = []
    chunk.extend(named[i:])
    yield chunk


def _ending_with_static_only(
    chunks: Iterable[list[RowChange]],
    sweep: RowSweep,
    loaded_before: bool,
    state: PartitionState,
    layout: TableLayout,
    now_s: int,
    loaded_after: bool | None = None,
) -> Iterator[list[RowChange]]:
    """The non-empty ``chunks``, the last one ending with the static-only row's change, which is known
    only once every row was swept (``loaded_after``: whether a loaded row exists after; by default,
    looked up in ``state`` at ``now_s``)."""
    last: list[RowChange] = []
    for chunk in chunks:
        if last:
            yield last
        last = chunk
    if loaded_after is None:
        loaded_after = _any_exists(state.rows.values(), layout, now_s)
    change = sweep.static_only_change(other_before=loaded_before, other_after=loaded_after)
    if change is not None:
        last.append(change)
    if last:
        yield last


def merge_event(
    txn: StateTransaction, schema: TableSchema, prepared: PreparedEvent, now_s: int, *, snapshot: bool = False
) -> Generator[list[RowChange], None, ApplyResult]:
    """Merge one prepared raw event (``snapshot``: a bootstrap read, see snapshot_lists) at ``now_s``;
    yield its changes in chunks; return what it changed in the stored state."""
    layout = layout_for(schema)
    partition_key = prepared.partition_key
    state = txn.load(schema, prepared, now_s)
    if snapshot:
        drop_known_list_elements(state, prepared, layout)
    else:
        adopt_snapshot_list_paths(state, prepared, layout)
    has_static = bool(layout.static) and bool(schema.clustering)
    static_before = static_columns(state, layout, now_s) if layout.static else {}
    # what the sweep must skip; only an update with a deletion or a static row can need a sweep
    wide = prepared.partition_deletion is not None or bool(prepared.ranges) or prepared.static_row is not None
    loaded = set(state.rows) if wide else set()
    loaded_before = has_static and _any_exists(state.rows.values(), layout, now_s)

    result, named = apply_prepared_with_changes(state, prepared, layout, now_s, static_only=False)
    if not result.changed:
        return result
    static_after = static_columns(state, layout, now_s) if layout.static and result.static else static_before
    static_changed = not same_columns(static_before, static_after, layout.lists)
    ranges: Sequence[tuple[bytes, bytes]] | None = ()
    if result.partition_deletion or static_changed:
        ranges = None  # every row
    elif result.range_tombstones:
        ranges = [(start, end) for start, end, _ in prepared.ranges]

    after = PartitionSide(state, now_s, static_after)
    if ranges == ():  # the usual case: the update changes the rows it names and no other
        if not has_static:
            if named:
                yield named
            chunks: Iterable[list[RowChange]] = ()
        else:
            sweep = RowSweep(layout, PartitionSide(state, now_s, static_before), after)
            chunks = _ending_with_static_only([named], sweep, loaded_before, state, layout, now_s)
    else:
        sweep = RowSweep(
            layout, PartitionSide(txn.header(schema, partition_key), now_s, static_before), after
        )
        skip = loaded | {key for key, _, _ in prepared.rows}
        chunks = _sweep_chunks(txn.rows(schema, partition_key, ranges), skip, sweep, named)
        if has_static:
            chunks = _ending_with_static_only(chunks, sweep, loaded_before, state, layout, now_s)
    for chunk in chunks:
        if chunk:
            stamp_write_times(chunk, result, static_changed=static_changed)
            yield chunk
    txn.save(
        schema,
        state,
        result.rows,
        now_s,
        header=result.partition_deletion or result.static or result.range_tombstones,
    )
    return result


def expire_partition(
    txn: StateTransaction, schema: TableSchema, partition_key: bytes, due: Sequence[DueExpiry], now_s: int
) -> Iterator[tuple[int, list[RowChange]]]:
    """The changes of a partition's due rows (and of every row, when a static cell expires), each chunk
    with the second of the first expiry it reports; then the rows and header are saved, so their due
    entries move on."""
    layout = layout_for(schema)
    first = min(item.at_s for item in due)
    keys = {item.clustering_key for item in due}
    state = txn.load_rows(schema, partition_key, keys, since_s=first - 1, now_s=now_s)
    touched: set[bytes | None] = set(keys)
    if layout.static:
        for chunk in _expire_all_rows(txn, schema, layout, state, first - 1, now_s, touched):
            if chunk:
                yield first, chunk
    else:
        for item in due:
            changes = expiry_changes(_view_of(state, item.clustering_key), schema, item.at_s - 1, now_s)
            touched.update(change.key for change in changes)
            if changes:
                yield item.at_s, changes
    txn.save(schema, state, touched, now_s, header=None in touched)


def _expire_all_rows(
    txn: StateTransaction,
    schema: TableSchema,
    layout: TableLayout,
    state: PartitionState,
    since_s: int,
    now_s: int,
    touched: set[bytes | None],
) -> Iterator[list[RowChange]]:
    """A table with static columns: one look at the partition. A static cell that expires changes every
    row; the rows not loaded are swept, and those among them that are due themselves join ``state`` to
    be saved (their changes are reported here, so their due entries must move on now)."""
    static_before = static_columns(state, layout, since_s)
    static_after = static_columns(state, layout, now_s)
    loaded_before = _any_exists(state.rows.values(), layout, since_s)
    loaded_after = _any_exists(state.rows.values(), layout, now_s)
    named = expiry_changes(state, schema, since_s, now_s, static_only=False)
    touched.update(change.key for change in named)
    sweep = RowSweep(
        layout, PartitionSide(state, since_s, static_before), PartitionSide(state, now_s, static_after)
    )
    if same_columns(static_before, static_after, layout.lists):
        chunks: Iterable[list[RowChange]] = [named]
    else:
        chunks = _swept_due(txn, schema, state, touched, sweep, named, now_s)
    for chunk in _ending_with_static_only(chunks, sweep, loaded_before, state, layout, now_s, loaded_after):
        if chunk and chunk[-1].key is None:
            touched.add(None)
        yield chunk


def _swept_due(
    txn: StateTransaction,
    schema: TableSchema,
    state: PartitionState,
    touched: set[bytes | None],
    sweep: RowSweep,
    named: list[RowChange],
    now_s: int,
) -> Iterator[list[RowChange]]:
    skip = set(state.rows) | {key for key in touched if key is not None}
    due_rows: list[tuple[bytes, RowState]] = []

    def rows() -> Iterator[tuple[bytes, RowState, int | None]]:
        for key, row, due in txn.rows(schema, state.partition_key, None):
            if key not in skip and due is not None and due <= now_s:
                due_rows.append((key, row))
            yield key, row, due

    yield from _sweep_chunks(rows(), skip, sweep, named)
    for key, row in due_rows:  # shadowed by the sweep: as the header shows them
        if not row.is_empty():
            state.rows[key] = row
        touched.add(key)


def _view_of(state: PartitionState, key: bytes | None) -> PartitionState:
    """The partition with only one due row (of a table without static columns)."""
    if key is None:
        return state
    row = state.rows.get(key)
    return PartitionState(
        state.partition_key,
        state.partition_deletion,
        None,
        {key: row} if row is not None else {},
        state.range_tombstones,
    )
