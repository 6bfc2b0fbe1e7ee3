"""A brute-force model of what SELECT returns after a set of raw events: the test oracle.

It shares no code with ``state``: it keeps every version of everything, and at read time picks each
cell's winner by Cassandra's reconcile rule written as a sort key, then checks it against the largest
deletion covering it (partition, range by decoded-value comparison, row, complex). That is the read path
of docs/ARCHITECTURE.md ("Merge rules"), evaluated directly instead of incrementally. Limits: collection
paths are compared by their bytes (use element types whose equal values have equal bytes), no counters,
clustering types whose decoded Python values order like Cassandra (int types, text).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from cassandra_model.cql_types import ListType
from cassandra_model.table_schema import ClusteringOrder, TableSchema

INT_MAX = 2**31 - 1
MISSING = -(2**70)

Visible = dict[tuple[Any, ...] | None, dict[str, Any]]


def _cell_rank(cell: dict[str, Any]) -> tuple[Any, ...]:
    tomb = cell["flags"] & 1
    dying = tomb or cell["flags"] & 2
    return (
        cell["timestamp"],
        1 if dying else 0,
        1 if tomb else 0,
        cell["local_deletion_time"] if dying else 0,
        cell["value"],
    )


def _cell_live(cell: dict[str, Any], now: int) -> bool:
    if cell["flags"] & 1:
        return False
    return not cell["flags"] & 2 or now < cell["local_deletion_time"]


def _liveness_rank(lv: dict[str, Any]) -> tuple[Any, ...]:
    ttl = lv["ttl"]
    return (lv["timestamp"], ttl == INT_MAX, ttl != 0, lv["local_expiration_time"] if ttl else INT_MAX)


def _liveness_live(lv: dict[str, Any], now: int) -> bool:
    return lv["ttl"] == 0 or (lv["ttl"] != INT_MAX and now < lv["local_expiration_time"])


class ReferenceModel:
    """Collects raw events of ONE partition; ``visible(now)`` evaluates the read."""

    def __init__(self, schema: TableSchema) -> None:
        self.schema = schema
        self.partition_deletions: list[int] = []
        self.ranges: list[tuple[tuple[Any, ...], bool, tuple[Any, ...], bool, int]] = []
        self.rows: dict[tuple[Any, ...] | None, dict[str, list[Any]]] = defaultdict(
            lambda: {
                "liveness": [],
                "deletions": [],
                "cells": defaultdict(list),
                "complex": defaultdict(list),
            }
        )

    def _decode(self, raw: Iterable[bytes | None]) -> tuple[Any, ...]:
        return tuple(
            None if v is None else c.type.decode(v) for c, v in zip(self.schema.clustering, raw, strict=False)
        )

    def add(self, event: dict[str, Any]) -> None:
        if event["partition_deletion"] is not None:
            self.partition_deletions.append(event["partition_deletion"]["timestamp"])
        start = None
        for marker in event["range_tombstones"]:
            kind, prefix, ts = (
                marker["kind"],
                self._decode(marker["clustering"]),
                marker["deletion"]["timestamp"],
            )
            if kind in (1, 7):
                start = (prefix, kind == 1, ts)
                continue
            assert start is not None
            self.ranges.append((start[0], start[1], prefix, kind in (6, 5), start[2]))
            start = None
            if kind in (2, 5):
                start = (prefix, kind == 2, marker["start_deletion"]["timestamp"])
        rows = [(None, event["static_row"])] if event["static_row"] is not None else []
        rows += [(self._decode(r["clustering"]), r) for r in event["rows"]]
        for key, record in rows:
            row = self.rows[key]
            if record["liveness"] is not None:
                row["liveness"].append(record["liveness"])
            if record["deletion"] is not None:
                row["deletions"].append(record["deletion"]["timestamp"])
            for item in record["complex_deletions"]:
                row["complex"][item["column"]].append(item["deletion"]["timestamp"])
            for cell in record["cells"]:
                row["cells"][(cell["column"], cell["path"])].append(cell)

    def _compare_prefix(self, row: tuple[Any, ...], prefix: tuple[Any, ...]) -> int:
        for column, a, b in zip(self.schema.clustering, row, prefix, strict=False):
            if a != b:
                result = -1 if a < b else 1
                return -result if column.clustering_order == ClusteringOrder.DESC else result
        return 0

    def _range_deletion(self, key: tuple[Any, ...]) -> int:
        best = MISSING
        for start, start_incl, end, end_incl, ts in self.ranges:
            after_start = self._compare_prefix(key, start)
            before_end = self._compare_prefix(key, end)
            if (after_start > 0 or (after_start == 0 and start_incl)) and (
                before_end < 0 or (before_end == 0 and end_incl)
            ):
                best = max(best, ts)
        return best

    def _columns(self, row: dict[str, Any], names: dict[str, Any], deleted: int, now: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        complex_: dict[str, list[tuple[bytes, bytes]]] = defaultdict(list)
        for (name, path), versions in row["cells"].items():
            if name not in names:
                continue
            winner = max(versions, key=_cell_rank)
            floor = deleted if path is None else max(deleted, *row["complex"].get(name, [MISSING]))
            if winner["timestamp"] <= floor or not _cell_live(winner, now):
                continue
            if path is None:
                out[name] = winner["value"]
            else:
                complex_[name].append((path, winner["value"]))
        for name, elements in complex_.items():
            t = names[name].type
            if isinstance(t, ListType):
                elements.sort(key=lambda e: t.decode_path(e[0]).time)
            else:
                elements.sort(key=lambda e: (t.decode_path(e[0]),))
            out[name] = tuple(elements)
        return out

    def visible(self, now: int) -> Visible:
        """{clustering values (None: static-only row): {column: value bytes or ((path, value), ...)}}."""
        partition = max(self.partition_deletions, default=MISSING)
        static: dict[str, Any] = {}
        if None in self.rows:
            static = self._columns(self.rows[None], self.schema.static_columns, partition, now)
        out: Visible = {}
        for key, row in self.rows.items():
            if key is None:
                continue
            deleted = max(partition, self._range_deletion(key), *row["deletions"], MISSING)
            regular = self._columns(row, self.schema.regular_columns, deleted, now)
            live = False
            if row["liveness"]:
                winner = max(row["liveness"], key=_liveness_rank)
                live = winner["timestamp"] > deleted and _liveness_live(winner, now)
            if live or regular:
                out[key] = {**static, **regular}
        if not out and static and self.schema.clustering:
            out[None] = dict(static)
        return out
