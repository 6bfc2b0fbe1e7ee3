"""Live TTL data, compared before it expires: Cassandra's remaining TTL against the workers' state.

The final comparison runs once every TTL has run out, when a TTL'd cell is gone from both sides whatever
its TTL was. So once the pipeline has caught up after the workload, while the last TTLs written are still
running, each single-cell column that has a TTL is read from Cassandra at ALL (``WRITETIME(c)``,
``TTL(c)``) and from the workers' state (`/scan`: per-cell write time and expiry). For every cell with a
TTL on either side:

- the worker must hold the cell with the same write time and an expiry within ``tolerance_s`` of
  Cassandra's (time of the read + ``TTL(c)``): a TTL lost, changed or taken from another write shows here;
- a cell the worker keeps with a TTL that Cassandra shows without one, or not at all, is wrong too.

A cell with less than ``tolerance_s`` to live, or gone by the time the workers were read, is counted as
expiring, not compared. Collections and UDTs (one TTL per element) are left to the final comparison.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from cassandra import ConsistencyLevel
from cassandra.query import SimpleStatement

from cassandra_model.table_schema import TableSchema
from cdc.verify.state_scan import scan_table
from runtime.service_process import ServiceProcess
from schemas.driver_rows import driver_row_image

TTL_TOLERANCE_S = 2

#: column -> (write time µs, TTL s or None) of one row, as Cassandra shows it
CellTimes = dict[str, tuple[int, int | None]]


@dataclass(slots=True)
class TtlCheck:
    compared: int = 0
    expiring: int = 0
    wrong: list[dict[str, Any]] = field(default_factory=list)

    def add(self, other: TtlCheck) -> None:
        self.compared += other.compared
        self.expiring += other.expiring
        self.wrong.extend(other.wrong)

    def summary(self, limit: int = 5) -> dict[str, Any]:
        return {
            "compared": self.compared,
            "expiring": self.expiring,
            "wrong": len(self.wrong),
            "examples": self.wrong[:limit],
        }


def check_live_ttls(
    session: Any,
    schemas: dict[str, TableSchema],
    workers: list[ServiceProcess],
    raw_partitions: int,
    *,
    rounds: int = 3,
    pause_s: float = 2.0,
) -> TtlCheck:
    """Every table's TTL'd cells, Cassandra then the workers right after, table by table; read again (up
    to ``rounds`` times) while some differ, so that only a difference that stays is reported."""
    check = TtlCheck()
    for attempt in range(rounds):
        check = TtlCheck()
        for _name, schema in sorted(schemas.items()):
            columns = ttl_columns(schema)
            if not columns:
                continue
            read_at, cells = select_cell_times(session, schema)
            rows, _twice = scan_table(workers, schema, raw_partitions)
            check.add(compare_ttls(cells, read_at, rows, int(time.time()), columns))
        if not check.wrong or attempt == rounds - 1:
            break
        time.sleep(pause_s)
    return check


def ttl_columns(schema: TableSchema) -> list[str]:
    """The columns that hold one cell with one TTL (no keys, collections, UDTs or counters)."""
    return [
        c.name
        for c in (*schema.static_columns.values(), *schema.regular_columns.values())
        if not c.type.multi_cell and not c.type.is_counter
    ]


def select_cell_times(session: Any, schema: TableSchema) -> tuple[int, dict[str, CellTimes]]:
    """(epoch seconds just before the read, key text -> live cells' write time and TTL), at ALL."""
    columns = ttl_columns(schema)
    keys = [c.name for c in (*schema.partition_key, *schema.clustering)]
    selectors = [f'"{k}"' for k in keys]
    for i, name in enumerate(columns):
        selectors += [f'WRITETIME("{name}") AS w{i}', f'TTL("{name}") AS t{i}']
    statement = SimpleStatement(
        f'SELECT {", ".join(selectors)} FROM "{schema.keyspace}"."{schema.table}"',
        consistency_level=ConsistencyLevel.ALL,
        fetch_size=2000,
    )
    now_s = int(time.time())
    out: dict[str, CellTimes] = {}
    for row in session.execute(statement):
        values = row._asdict()
        key, _image = driver_row_image(schema, {k: values[k] for k in keys})
        cells = {
            name: (values[f"w{i}"], values[f"t{i}"])
            for i, name in enumerate(columns)
            if values[f"w{i}"] is not None
        }
        out[key] = cells
    return now_s, out


def compare_ttls(
    cassandra: dict[str, CellTimes],
    read_at_s: int,
    worker_rows: dict[str, dict[str, Any]],
    scanned_at_s: int,
    columns: list[str],
    *,
    tolerance_s: int = TTL_TOLERANCE_S,
) -> TtlCheck:
    """Cassandra's cells (read at ``read_at_s``) against the workers' rows (`/scan` rows, by key text,
    scanned by ``scanned_at_s``)."""
    check = TtlCheck()
    wanted = set(columns)
    for key, cells in cassandra.items():
        worker_cells = worker_rows.get(key, {}).get("cells", {})
        for column, (writetime, ttl) in cells.items():
            if ttl is None:
                continue
            expires = read_at_s + ttl
            if ttl <= tolerance_s or expires <= scanned_at_s + tolerance_s:
                check.expiring += 1
                continue
            problem = _cell_problem(worker_cells.get(column), writetime, expires, tolerance_s)
            if problem is None:
                check.compared += 1
            else:
                check.wrong.append({"key": key, "column": column, "cassandra": {"writetime": writetime,
                                    "ttl": ttl, "expires_at": expires}, "worker": worker_cells.get(column),
                                    "problem": problem})  # fmt: skip
    for key, row in worker_rows.items():
        for column, cell in row.get("cells", {}).items():
            if column not in wanted or not isinstance(cell, dict) or cell.get("expires_at") is None:
                continue
            if cell["expires_at"] <= scanned_at_s + tolerance_s:
                continue  # expiring in the worker now: Cassandra may have dropped it already
            shown = cassandra.get(key, {}).get(column)
            if shown is None or shown[1] is None:
                check.wrong.append({"key": key, "column": column, "cassandra": shown, "worker": cell,
                                    "problem": "the worker keeps a TTL Cassandra does not show"})  # fmt: skip
    return check


def _cell_problem(cell: Any, writetime: int, expires: int, tolerance_s: int) -> str | None:
    if not isinstance(cell, dict):
        return "the worker does not hold the live cell"
    if cell.get("writetime") != writetime:
        return f"write time {cell.get('writetime')} in the worker, {writetime} in Cassandra"
    if cell.get("expires_at") is None:
        return "no TTL in the worker"
    if abs(cell["expires_at"] - expires) > tolerance_s:
        return f"expires at {cell['expires_at']} in the worker, {expires} in Cassandra"
    return None
