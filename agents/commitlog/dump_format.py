"""A JSON object per decoded partition update, for ``cdc segment dump`` and for comparing decoders.

Shape: keyspace, table, table_id, is_counter, partition_key ({column: value}), digest, position
({segment, offset, position}), partition_deletion, static, rows (clustering list, liveness, deletion,
complex_deletions, cells), range_tombstones. A cell: column, path, timestamp, ttl, local_deletion_time,
tombstone, expiring, value (typed, see cql_types.to_json) and raw (hex). A value that does not decode
renders as null with an ``error`` beside it, so one bad value never hides the rest of the dump.
"""

from __future__ import annotations

from typing import Any

from cassandra_model.cql_types import CqlType, to_json
from cassandra_model.digest import update_digest_hex
from cassandra_model.errors import ValueDecodeError
from cassandra_model.partition_update import (
    Cell,
    DeletionTime,
    PartitionUpdate,
    RangeTombstoneBound,
    RangeTombstoneBoundary,
    Row,
)


def render_deletion(deletion: DeletionTime | None) -> dict[str, int] | None:
    if deletion is None:
        return None
    return {
        "marked_for_delete_at": deletion.marked_for_delete_at,
        "local_deletion_time": deletion.local_deletion_time,
    }


def render_cell(cell: Cell) -> dict[str, Any]:
    out: dict[str, Any] = {
        "column": cell.column.name,
        "path": None,
        "timestamp": cell.timestamp,
        "ttl": cell.ttl,
        "local_deletion_time": cell.local_deletion_time,
        "tombstone": cell.is_tombstone,
        "expiring": cell.is_expiring,
        "value": None,
        "raw": cell.raw.hex(),
    }
    try:
        if cell.path is None:
            value_type: CqlType | None = cell.column.type
        else:
            column_type = cell.column.type
            value_type = column_type.cell_value_type(cell.path)
            out["path"] = to_json(cell.path_value, column_type.path_type)
        out["value"] = to_json(cell.value, value_type)
    except ValueDecodeError as exc:
        out["error"] = str(exc)
    return out


def _clustering(values: tuple[bytes | None, ...], types: tuple[CqlType, ...]) -> tuple[list[Any], str | None]:
    out: list[Any] = []
    error = None
    for raw, t in zip(values, types, strict=False):
        try:
            out.append(None if raw is None else to_json(t.decode(raw), t))
        except ValueDecodeError as exc:
            out.append(raw.hex() if raw is not None else None)
            error = str(exc)
    return out, error


def render_row(row: Row) -> dict[str, Any]:
    clustering, error = _clustering(row.clustering_raw, row.clustering_types)
    liveness = None
    if row.timestamp is not None:
        liveness = {
            "timestamp": row.timestamp,
            "ttl": row.ttl,
            "local_expiration_time": row.local_expiration_time,
        }
    out: dict[str, Any] = {
        "clustering": clustering,
        "liveness": liveness,
        "deletion": render_deletion(row.deletion),
        "cells": [render_cell(c) for c in row.cells],
    }
    if row.complex_deletions:
        out["complex_deletions"] = {d.column.name: render_deletion(d.deletion) for d in row.complex_deletions}
    if row.shadowable_deletion:
        out["shadowable_deletion"] = True
    if error is not None:
        out["error"] = error
    return out


def render_marker(marker: RangeTombstoneBound | RangeTombstoneBoundary) -> dict[str, Any]:
    clustering, error = _clustering(marker.clustering_raw, marker.clustering_types)
    out: dict[str, Any] = {"kind": marker.kind.name, "clustering": clustering}
    if isinstance(marker, RangeTombstoneBoundary):
        out["end_inclusive"] = marker.end_inclusive
        out["start_inclusive"] = marker.start_inclusive
        out["end_deletion"] = render_deletion(marker.end_deletion)
        out["start_deletion"] = render_deletion(marker.start_deletion)
    else:
        out["start"] = marker.is_start
        out["inclusive"] = marker.inclusive
        out["deletion"] = render_deletion(marker.deletion)
    if error is not None:
        out["error"] = error
    return out


def render_partition_key(update: PartitionUpdate) -> tuple[dict[str, Any], str | None]:
    columns = update.schema.partition_key
    try:
        values = update.partition_key_values()
    except ValueDecodeError as exc:
        return {"raw": update.partition_key.hex()}, str(exc)
    return {c.name: to_json(v, c.type) for c, v in zip(columns, values, strict=True)}, None


def render_update(update: PartitionUpdate, *, digest: str | None = None) -> dict[str, Any]:
    """The JSON object of one partition update (``digest`` defaults to digest.update_digest_hex)."""
    partition_key, error = render_partition_key(update)
    out: dict[str, Any] = {
        "keyspace": update.keyspace,
        "table": update.table,
        "table_id": str(update.table_id),
        "is_counter": update.is_counter,
        "partition_key": partition_key,
        "digest": digest if digest is not None else update_digest_hex(update),
        "position": {"segment": update.segment, "offset": update.offset, "position": update.position},
        "partition_deletion": render_deletion(update.partition_deletion),
        "static": render_row(update.static_row) if update.static_row is not None else None,
        "rows": [render_row(r) for r in update.rows],
        "range_tombstones": [render_marker(m) for m in update.range_tombstones],
    }
    if error is not None:
        out["error"] = error
    return out
