"""The demo's writes: new readings each round, then updates, a tag and a delete on the previous round's."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

from cassandra.cluster import Session

from cdc.demo.table import KEYSPACE, TABLE
from cdc.demo.tally import Row, Tally, Write

TTL_S = 5


class Workload:
    """Rounds of writes: new readings, then updates, a tag and a delete on the previous round's rows."""

    def __init__(self, session: Session, tally: Tally, rows: int, seed: int = 7) -> None:
        self.session = session
        self.tally = tally
        self.rows = rows
        self.random = random.Random(seed)
        self.previous: list[Row] = []
        self.ttl_row: Row | None = None
        self._last_us = 0
        table = f"{KEYSPACE}.{TABLE}"
        insert = f"INSERT INTO {table} (sensor, at, value, status, tags) VALUES (?, ?, ?, ?, ?)"
        key = "WHERE sensor = ? AND at = ?"
        self.statements = {
            "insert": session.prepare(f"{insert} USING TIMESTAMP ?"),
            "insert_ttl": session.prepare(f"{insert} USING TTL {TTL_S} AND TIMESTAMP ?"),
            "update": session.prepare(f"UPDATE {table} USING TIMESTAMP ? SET value = ?, status = ? {key}"),
            "add_tag": session.prepare(f"UPDATE {table} USING TIMESTAMP ? SET tags = tags + ? {key}"),
            "delete": session.prepare(f"DELETE FROM {table} USING TIMESTAMP ? {key}"),
        }

    def plan(self, round_no: int) -> list[tuple[str, Row]]:
        base_ms = int(time.time() * 1000)
        new = [
            Row(f"sensor-{i % 4 + 1}", base_ms + i, round(self.random.uniform(15.0, 30.0), 1), {"celsius"})
            for i in range(self.rows)
        ]
        steps: list[tuple[str, Row]] = []
        if round_no == 1:  # first, so it expires well before the demo ends
            self.ttl_row = Row("sensor-9", base_ms + self.rows, 99.9, {"probe"})
            steps.append(("insert_ttl", self.ttl_row))
        steps += [("insert", r) for r in new]
        targets = [r for r in (self.previous if round_no > 1 else new) if not r.deleted]
        steps += [("update", r) for r in targets[:2]]
        if targets:
            steps += [("add_tag", targets[0]), ("delete", targets[-1])]
        self.previous = new
        return steps

    def _values(self, step: str, row: Row, round_no: int, ts: int) -> tuple[Any, ...]:
        if step == "insert":
            return (row.sensor, row.at, row.value, "ok", row.tags, ts)
        if step == "insert_ttl":
            return (row.sensor, row.at, row.value, "transient", row.tags, ts)
        if step == "update":
            row.value = round(row.value + 1.5, 1)
            return (ts, row.value, "checked", row.sensor, row.at)
        if step == "add_tag":
            row.tags.add(f"calibrated-{round_no}")
            return (ts, {f"calibrated-{round_no}"}, row.sensor, row.at)
        row.deleted = True
        return (ts, row.sensor, row.at)

    async def write(self, round_no: int, step: str, row: Row) -> None:
        self._last_us = ts = max(int(time.time() * 1_000_000), self._last_us + 1)
        op = {"insert": "c", "insert_ttl": "c", "delete": "d"}.get(step, "u")
        write = Write(op, row.key, round_no, with_ttl=step == "insert_ttl")
        self.tally.pending[ts] = write  # before the write: its event may beat the acknowledgement here
        if write.with_ttl:
            self.tally.pending_expiries.add(row.key)
        values = self._values(step, row, round_no, ts)

        def execute() -> None:
            self.session.execute(self.statements[step], values)
            write.acked = time.time()

        await asyncio.to_thread(execute)
