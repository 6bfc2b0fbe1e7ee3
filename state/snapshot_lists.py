"""List elements of bootstrap (snapshot) events, which cannot carry the real cell paths.

CQL does not show a list element's cell path (a timeuuid), so ``pipeline.snapshot_events`` generates
paths in list order (``schemas.raw_event.is_snapshot_list_path``). A write made between CDC's start and the
bootstrap's read reaches the worker twice: from the commit log under its real path and from the snapshot
under a generated one. These two functions make it one cell whichever arrives first, by matching write
time and value; they change nothing for tables without lists or states without snapshot elements.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from schemas.raw_event import is_snapshot_list_path
from state.partition_state import PartitionState, PreparedEvent
from state.row_state import RowState
from state.table_layout import TableLayout


def drop_known_list_elements(state: PartitionState, prepared: PreparedEvent, layout: TableLayout) -> None:
    """Bootstrap (snapshot) events cannot know a list element's real cell path (a timeuuid CQL does not
    show) and carry generated ones. An element the state already holds from the stream with the same
    write time and value is that same cell: it is dropped from the event rather than added a second time
    under another path (writes between CDC's start and the bootstrap's read reach the worker both ways)."""
    lists = layout.lists
    if not lists:
        return

    def keep_unknown(row: RowState | None, record: dict[str, Any]) -> None:
        if row is None:
            return
        known = Counter(
            (name, cell.timestamp, cell.value)
            for name in lists
            for cell in row.complex_cells.get(name, {}).values()
        )
        if not known:
            return
        kept = []
        for cell in record["cells"]:
            signature = (cell["column"], cell["timestamp"], bytes(cell["value"]))
            if cell["column"] in lists and known[signature] > 0:
                known[signature] -= 1
                continue
            kept.append(cell)
        record["cells"] = kept

    if prepared.static_row is not None:
        keep_unknown(state.static_row, prepared.static_row)
    for key, _, record in prepared.rows:
        keep_unknown(state.rows.get(key), record)


def adopt_snapshot_list_paths(state: PartitionState, prepared: PreparedEvent, layout: TableLayout) -> None:
    """The other order of ``drop_known_list_elements``: a stream event brings, under its real path, a list
    element a bootstrap event stored first under a generated path (same write time and value). The
    event's cell takes the stored path, so the element is merged as the same cell, not shown twice."""
    lists = layout.lists
    if not lists:
        return

    def adopt(row: RowState | None, record: dict[str, Any]) -> None:
        if row is None:
            return
        generated: dict[tuple[str, int, bytes], list[bytes]] = defaultdict(list)
        for name in lists:
            for cell in row.complex_cells.get(name, {}).values():
                if is_snapshot_list_path(cell.path):
                    generated[(name, cell.timestamp, cell.value)].append(cell.path)  # type: ignore[arg-type]
        if not generated:
            return
        for cell in record["cells"]:
            if cell["column"] not in lists or cell["flags"] & 0x01 or is_snapshot_list_path(cell["path"]):
                continue
            paths = generated.get((cell["column"], cell["timestamp"], bytes(cell["value"])))
            if paths:
                cell["path"] = paths.pop()

    if prepared.static_row is not None:
        adopt(state.static_row, prepared.static_row)
    for key, _, record in prepared.rows:
        adopt(state.rows.get(key), record)
