"""The schema source knows every table, whatever `cassandra.keyspaces` captures.

Found by the acceptance tests: with `keyspaces` set, the catalog held only those keyspaces, so each
mutation of another table (every system table included) read as "a table created since the last load":
a schema reload and up to 2 s with reading stopped, once per table id.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from typing import Any

import pytest

import agents.schema_source as schema_source_module
from agents.commitlog.errors import UnknownColumnError
from agents.metrics import AgentMetrics
from agents.schema_source import MissAction, SchemaSource
from cassandra_model.ddl_parser import load_schema_from_cql
from cassandra_model.errors import UnknownTableError
from cassandra_model.table_schema import SchemaCatalog
from runtime.config import CassandraConfig

CAPTURED = uuid.UUID("11111111-1111-1111-1111-111111111111")
OTHER = uuid.UUID("22222222-2222-2222-2222-222222222222")
NODE_SCHEMA = load_schema_from_cql(
    f"CREATE TABLE shop.orders (id int PRIMARY KEY, v text) WITH ID = {CAPTURED} AND cdc = true;\n"
    f"CREATE TABLE billing.invoices (id int PRIMARY KEY, v text) WITH ID = {OTHER} AND cdc = true;\n"
)


def fake_load(session: Any, keyspaces: Iterable[str] | None = None, **_: Any) -> SchemaCatalog:
    """What load_schema_from_session returns for a node holding NODE_SCHEMA."""
    wanted = None if keyspaces is None else set(keyspaces)
    return SchemaCatalog(t for t in NODE_SCHEMA.tables() if wanted is None or t.keyspace in wanted)


def test_tables_of_other_keyspaces_are_known_but_not_captured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(schema_source_module, "load_schema_from_session", fake_load)
    monkeypatch.setattr(SchemaSource, "_connect", lambda self: object())
    source = SchemaSource(CassandraConfig(keyspaces=["shop"]), cluster_name="c", metrics=AgentMetrics())
    assert source.reload()

    other = source.catalog.get(OTHER)
    assert other is not None, "billing.invoices is unknown: its mutations would stall reading for a reload"
    assert not source.captured(other)
    orders = source.catalog.get(CAPTURED)
    assert orders is not None and source.captured(orders)
    assert [e.table for e in source.pending_events()] == ["orders"], "only captured tables are published"
    # a table that really is new still gets a reload (after the rate limit), never a silent skip
    assert source.resolve_miss(UnknownTableError(str(uuid.uuid4()))) is MissAction.WAIT


def test_a_column_the_nodes_schema_lacks_is_waited_for_not_given_up_after_one_reload(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Seen in a fault campaign: a node back from kill -9 logged cells of a column added while it was down
    for three minutes before its own schema had the column, and the agent quarantined 83 entries, one per
    reload. Now reading waits before the entry, reloading every MIN_RELOAD_INTERVAL_S, until the column
    arrives; it gives the entry up only after ``unknown_column_wait_s``."""
    clock = [1000.0]
    monkeypatch.setattr(schema_source_module.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(schema_source_module, "load_schema_from_session", fake_load)
    monkeypatch.setattr(SchemaSource, "_connect", lambda self: object())
    reloads = []
    real_reload = SchemaSource.reload

    def counted(self: SchemaSource) -> bool:
        reloads.append(clock[0])
        return real_reload(self)

    monkeypatch.setattr(SchemaSource, "reload", counted)
    source = SchemaSource(
        CassandraConfig(keyspaces=["shop"]),
        cluster_name="c",
        metrics=AgentMetrics(),
        unknown_column_wait_s=60,
    )
    assert source.reload()
    miss = UnknownColumnError(
        "unknown regular column 'extra' in table shop.orders", column="shop.orders.extra"
    )
    actions = []
    for _ in range(40):  # the agent meets the entry again every cycle; here every 2.5 s
        clock[0] += 2.5
        actions.append(source.resolve_miss(miss))
        actions.append(source.resolve_miss(miss))  # decoded again at once after a reload: still unknown
    assert MissAction.GIVE_UP not in actions[: 2 * 23], actions
    assert actions.count(MissAction.RETRY) >= 20 and len(reloads) >= 21, (actions, reloads)
    assert actions[-1] is MissAction.GIVE_UP, "given up after the wait (quarantined, counted)"

    # missed again much later (a column added again after a drop): a new wait, not the old one's end
    clock[0] += 3600
    assert source.resolve_miss(miss) is MissAction.RETRY


def test_a_schema_change_logged_before_the_last_reload_needs_no_reload(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A fresh node's backlog starts with dozens of system_schema mutations (its own keyspaces, then the
    user's DDL); a reload for each cost the agent about a second of CPU before its first event."""
    monkeypatch.setattr(schema_source_module, "load_schema_from_session", fake_load)
    monkeypatch.setattr(SchemaSource, "_connect", lambda self: object())
    source = SchemaSource(CassandraConfig(), cluster_name="c", metrics=AgentMetrics())
    assert not source.covers(1), "nothing is covered before the first reload"
    before = time.time_ns() // 1000
    assert source.reload()
    margin = schema_source_module.SCHEMA_CLOCK_MARGIN_US
    assert source.covers(before - margin - 1)
    assert not source.covers(before - margin + 1_000_000), "a DDL within the clock margin is reloaded for"
    assert not source.covers(time.time_ns() // 1000 + 1), "a DDL after the reload is reloaded for"
    assert not source.covers(None)
