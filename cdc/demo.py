"""`cdc demo`: the main job a newcomer runs first.

Brings up the local services, creates a table WITH cdc = true, writes rows in rounds and shows, after
each round, the commit-log segment in cdc_raw and its durable `_cdc.idx` offset growing without a flush.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from agents.cdc_raw import CdcSegment, list_cdc_segments
from infra.cql import connect
from infra.settings import InfraSettings
from infra.stack import LocalStack

KEYSPACE = "demo"
TABLE = "readings"


def _offsets(cdc_raw: Path) -> dict[str, int]:
    return {s.path.name: s.index.offset for s in list_cdc_segments(cdc_raw) if s.index is not None}


def _settle(cdc_raw: Path, before: dict[str, int], timeout_s: float = 5.0) -> list[CdcSegment]:
    """Wait for the periodic commit-log sync to publish the round's data in `_cdc.idx`."""
    deadline = time.monotonic() + timeout_s
    last = _offsets(cdc_raw)
    while time.monotonic() < deadline:
        time.sleep(0.2)
        now = _offsets(cdc_raw)
        if now != before and now == last:
            break
        last = now
    return [s for s in list_cdc_segments(cdc_raw) if s.index is not None]


def run_demo(settings: InfraSettings, *, rows: int, rounds: int) -> int:
    stack = LocalStack(settings)
    stack.up(nodes=1)
    node = stack.node(1)
    spec = node.spec
    print(f"\nlogs: {settings.logs}\ncdc_raw: {spec.cdc_raw}\n")

    cluster = connect(spec.address, spec.cql_port)
    try:
        session = cluster.connect()
        session.execute(
            f"CREATE KEYSPACE IF NOT EXISTS {KEYSPACE} "
            "WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}"
        )
        session.execute(
            f"CREATE TABLE IF NOT EXISTS {KEYSPACE}.{TABLE} "
            "(sensor text, at timestamp, value double, note text, PRIMARY KEY (sensor, at)) WITH cdc = true"
        )
        if not cluster.control_connection.wait_for_schema_agreement():
            print("warning: the nodes do not agree on the schema yet; the first writes may fail")
        print(f"table {KEYSPACE}.{TABLE} WITH cdc = true\n")
        insert = session.prepare(
            f"INSERT INTO {KEYSPACE}.{TABLE} (sensor, at, value, note) VALUES (?, ?, ?, ?)"
        )
        for round_no in range(1, rounds + 1):
            before = _offsets(spec.cdc_raw)
            started = time.monotonic()
            for i in range(rows):
                session.execute(
                    insert,
                    (
                        f"sensor-{i % 10}",
                        int(time.time() * 1000) + i,
                        i * 0.5,
                        f"note-{uuid.uuid4().hex[:8]}",
                    ),
                )
            took = time.monotonic() - started
            segments = _settle(spec.cdc_raw, before)
            print(f"round {round_no}: wrote {rows} rows in {took:.2f} s")
            for segment in segments:
                old = before.get(segment.path.name, 0)
                new = segment.index.offset
                state = "COMPLETED" if segment.index.completed else "live"
                growth = f"+{new - old:,} bytes durable" if new > old else "unchanged"
                print(f"  {segment.path.name}  _cdc.idx offset {old:>10,} -> {new:>10,}  ({growth}, {state})")
    finally:
        cluster.shutdown()
    print(
        "\nNo flush was issued: the offsets moved with Cassandra's periodic commit-log sync.\n"
        "Services keep running. `cdc infra status` shows them; `cdc infra down` stops them."
    )
    return 0
