"""cdc verify in secure mode: logins survive a stopped node, and schema agreement survives a lost control
connection (fakes of the driver; the real run is `cdc verify` with CDC_SECURE=1)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from cassandra import ConsistencyLevel
from cassandra.connection import ConnectionShutdown

from cdc.verify import faults
from cdc.verify.faults import replicate_logins, wait_for_schema_agreement


class FakeSession:
    def __init__(self, replication_factor: str) -> None:
        self.replication_factor = replication_factor
        self.statements: list[tuple[str, Any]] = []

    def execute(self, statement: Any, params: Any = None) -> Any:
        text = getattr(statement, "query_string", statement)
        self.statements.append((text, getattr(statement, "consistency_level", None)))
        if "system_schema.keyspaces" in text:
            row = SimpleNamespace(
                replication={"class": "SimpleStrategy", "replication_factor": self.replication_factor}
            )
            return SimpleNamespace(one=lambda: row)
        if "system_schema.tables" in text:
            return [SimpleNamespace(table_name=n) for n in ("roles", "role_members")]
        return []


class FakeCluster:
    def __init__(self, failures: int = 0) -> None:
        self.failures = failures
        self.calls = 0
        self.control_connection = self

    def wait_for_schema_agreement(self) -> bool:
        self.calls += 1
        if self.calls <= self.failures:
            raise ConnectionShutdown("Connection to 127.0.0.2:28342 is already closed")
        return True


def test_logins_are_replicated_to_every_node_then_read_back_at_all() -> None:
    session, cluster = FakeSession("1"), FakeCluster()
    assert replicate_logins(session, cluster, 3) is True
    texts = [t for t, _ in session.statements]
    assert any("ALTER KEYSPACE system_auth" in t and "'replication_factor': 3" in t for t in texts)
    reads = [(t, cl) for t, cl in session.statements if t.startswith("SELECT * FROM system_auth")]
    assert [t for t, _ in reads] == [
        'SELECT * FROM system_auth."role_members"',
        'SELECT * FROM system_auth."roles"',
    ]
    assert {cl for _, cl in reads} == {ConsistencyLevel.ALL}
    assert cluster.calls == 1


def test_replicated_logins_are_not_altered_again() -> None:
    session = FakeSession("3")
    assert replicate_logins(session, FakeCluster(), 3) is False
    assert not [t for t, _ in session.statements if t.startswith("ALTER")]


def test_schema_agreement_waits_again_after_a_lost_control_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(faults.time, "sleep", lambda _s: None)
    cluster = FakeCluster(failures=2)
    wait_for_schema_agreement(cluster)
    assert cluster.calls == 3
    with pytest.raises(ConnectionShutdown):
        wait_for_schema_agreement(FakeCluster(failures=10**6), timeout_s=0)
