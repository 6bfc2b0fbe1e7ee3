"""The change events a merge or the passing of time produces: one per row whose visible image changed.

``op`` is ``c`` when a row appears, ``u`` when its visible values change, ``d`` when it disappears, and
there is no change at all when the image is unchanged: a duplicate, a write that loses last-write-wins,
a rewrite of the same values, or a deletion of what was already gone. A change of static columns changes
every row of the partition. The static-only row (live static cells and no row) appears and disappears
like any other row, under the key ``None``.

Time: expiring cells die without any event arriving. Before applying events at ``now``, a worker must
first emit ``expiry_changes(state, schema, last_now, now)`` (what expired since it last looked, with images
at both times), then arm a timer for ``next_expiry(state, now)``. Run ``purge`` only after that, since a
purged expired cell can no longer show in the earlier image.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cassandra_model.table_schema import TableSchema
from state.partition_state import ApplyResult, PartitionState, PreparedEvent, prepare_event
from state.row_image import (
    ColumnImage,
    RowImage,
    regular_image,
    same_columns,
    static_columns,
    static_only_image,
)
from state.row_state import RowState
from state.table_layout import TableLayout, layout_for


@dataclass(slots=True)
class RowChange:
    """One change of one row: ``key`` is its clustering key (None: the static-only row).

    ``write_time`` is the time (µs) of the write that made the change (``ApplyResult.write_time``), not
    the row's newest surviving cell: a ``SET col = null`` is stamped with its own time. None for a change
    that time made (an expiry) and where no kept part of the update reaches the row."""

    op: str
    key: bytes | None
    before: RowImage | None
    after: RowImage | None
    write_time: int | None = None


def stamp_write_times(changes: list[RowChange], result: ApplyResult, *, static_changed: bool) -> None:
    """Give each change of one merged update the time of the write that made it."""
    for change in changes:
        change.write_time = result.write_time(change.key, static_changed=static_changed)


def diff(
    key: bytes | None,
    before: RowImage | None,
    after: RowImage | None,
    lists: frozenset[str] = frozenset(),
) -> RowChange | None:
    """The change between two images of the same row, or None when nothing visible changed (``lists``:
    the table's list columns, see ``same_columns``)."""
    if before is None:
        return None if after is None else RowChange("c", key, None, after)
    if after is None:
        return RowChange("d", key, before, None)
    if before.same_values(after, lists):
        return None
    return RowChange("u", key, before, after)


def _has_static(layout: TableLayout) -> bool:
    return bool(layout.static) and bool(layout.schema.clustering)


def apply_with_changes(
    state: PartitionState, event: dict[str, Any], schema: TableSchema, now_s: int
) -> tuple[ApplyResult, list[RowChange]]:
    """Apply one raw event and return what it changed in the state and in the visible rows at ``now_s``.

    Changes come static-only row first, then in clustering order.
    """
    layout = layout_for(schema)
    return apply_prepared_with_changes(state, prepare_event(event, layout), layout, now_s)


def apply_prepared_with_changes(
    state: PartitionState,
    prepared: PreparedEvent,
    layout: TableLayout,
    now_s: int,
    *,
    static_only: bool = True,
) -> tuple[ApplyResult, list[RowChange]]:
    """``apply_with_changes`` for an event already prepared.

    The changes are those of the rows in ``state``, so ``state`` needs every row the event can change;
    for tables with static columns, every row of the partition (a static change changes every row's
    image). Without ``static_only``, the static-only row's change is left out (a store, which loads
    less, works it out with ``partition_sweep``).
    """
    keys, static_touched = state.keys_touched_by(prepared)
    static_before = static_columns(state, layout, now_s)
    before = {key: regular_image(state, key, layout, now_s, static_before) for key in keys}
    has_static = static_only and _has_static(layout)
    only_before = static_only_image(state, layout, now_s, static_before) if has_static else None

    result = state.apply_prepared(prepared, layout)
    if not result.changed:
        return result, []

    static_after = static_before
    if static_touched and result.static:
        static_after = static_columns(state, layout, now_s)
    changed_keys: set[bytes] = set(result.rows)
    static_changed = not same_columns(static_before, static_after, layout.lists)
    if static_changed:
        changed_keys.update(state.rows)
    changes = []
    if has_static:
        change = diff(None, only_before, static_only_image(state, layout, now_s, static_after), layout.lists)
        if change is not None:
            changes.append(change)
    for key in sorted(changed_keys):
        old = before[key] if key in before else regular_image(state, key, layout, now_s, static_before)
        change = diff(key, old, regular_image(state, key, layout, now_s, static_after), layout.lists)
        if change is not None:
            changes.append(change)
    stamp_write_times(changes, result, static_changed=static_changed)
    return result, changes


def _expires_within(row: RowState, since_s: int, now_s: int) -> bool:
    when = row.next_expiry(since_s)
    return when is not None and when <= now_s


def expiry_changes(
    state: PartitionState, schema: TableSchema, since_s: int, now_s: int, *, static_only: bool = True
) -> list[RowChange]:
    """The changes that expiring cells and livenesses made between ``since_s`` and ``now_s`` (to the
    rows of ``state``; ``static_only`` as in ``apply_prepared_with_changes``)."""
    if now_s <= since_s:
        return []
    layout = layout_for(schema)
    static_before: dict[str, ColumnImage] = static_columns(state, layout, since_s)
    static_after: dict[str, ColumnImage] = static_columns(state, layout, now_s)
    if same_columns(static_before, static_after, layout.lists):
        keys = [k for k, row in state.rows.items() if _expires_within(row, since_s, now_s)]
    else:
        keys = list(state.rows)
    changes = []
    if static_only and _has_static(layout):
        change = diff(
            None,
            static_only_image(state, layout, since_s, static_before),
            static_only_image(state, layout, now_s, static_after),
            layout.lists,
        )
        if change is not None:
            changes.append(change)
    for key in sorted(keys):
        change = diff(
            key,
            regular_image(state, key, layout, since_s, static_before),
            regular_image(state, key, layout, now_s, static_after),
            layout.lists,
        )
        if change is not None:
            changes.append(change)
    return changes


def next_expiry(state: PartitionState, now_s: int) -> int | None:
    """The earliest time after ``now_s`` at which a live cell or row liveness of the partition expires
    (arm a timer for it and call ``expiry_changes`` then)."""
    return state.next_expiry(now_s)
