"""The `cdc verify` workload against real Cassandra: every statement it generates is one Cassandra accepts.

A typo in generated CQL, a literal the driver renders wrongly for a column type, or a schema change applied
in the wrong phase would otherwise first show up as client errors in a long three-node verify run.
"""

from __future__ import annotations

import time
from typing import Any

from cassandra.cluster import Session

from cdc.verify.workload.seeded_workload import Workload

KEYSPACE = "verify_workload_cql_it"


def test_every_phase_runs_without_errors(session: Session) -> None:
    workload = Workload(KEYSPACE, 2024, replication_factor=1, base_time_us=int(time.time() * 1_000_000))
    session.execute(f"DROP KEYSPACE IF EXISTS {KEYSPACE}")
    try:
        for statement in workload.setup_statements():
            session.execute(statement)
        failures: list[str] = []
        lwt_applied = 0
        executed = 0
        for phase in workload.phases(500):
            for op in phase.operations:
                try:
                    result: Any = session.execute(op.cql, op.params)
                except Exception as exc:
                    failures.append(f"{op.kind}: {op.cql} {op.params!r}: {exc}")
                    continue
                executed += 1
                if op.kind.startswith("lwt"):
                    lwt_applied += bool(result.was_applied)
            for statement in phase.schema_change_after:
                session.execute(statement)
        assert not failures, "\n".join(failures[:10])
        assert executed == 500
        assert lwt_applied > 0, "no LWT applied: the conditions never match what was written"

        columns = {
            row.column_name
            for row in session.execute(
                "SELECT column_name FROM system_schema.columns WHERE keyspace_name = %s AND table_name = 'kv'",
                (KEYSPACE,),
            )
        }
        assert "extra" in columns and "note" not in columns
        # Every table reads back through the driver (all CQL types deserialize).
        for table in workload.tables():
            rows = list(session.execute(f"SELECT * FROM {KEYSPACE}.{table}"))
            assert rows, f"{table} is empty after the run"
    finally:
        session.execute(f"DROP KEYSPACE IF EXISTS {KEYSPACE}")
