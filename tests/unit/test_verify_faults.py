"""cdc verify in secure mode: logins survive a stopped node, and schema agreement survives a lost control
connection (fakes of the driver; the real run is `cdc verify` with CDC_SECURE=1)."""

from __future__ import annotations

import socket
from pathlib import Path
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


# ---------------------------------------------------------------------------------------------------------
# a fault that does not recover: a verdict, not a traceback


def test_a_broker_whose_port_was_taken_makes_the_run_invalid(tmp_path: Path) -> None:
    """The broker restart meets its port taken (a client's outgoing connection can take a port in the
    ephemeral range while the broker is down): it is retried, then the run is declared invalid, naming
    the service and the reason, and no further fault fires."""
    from infra.settings import InfraSettings
    from infra.stack import LocalStack
    from runtime.service_process import free_port

    squatter = socket.socket()
    squatter.bind(("127.0.0.1", free_port()))
    squatter.listen()
    port = squatter.getsockname()[1]
    try:
        stack = LocalStack(InfraSettings.from_env(home=tmp_path, kafka_port=port))
        said: list[str] = []
        injector = faults.FaultInjector(
            stack,
            [],
            [],
            faults.FaultPlan([(0, "broker"), (0, "broker")]),
            seed=1,
            say=said.append,
            restart_backoff_s=(0.0, 0.0),
        )
        injector.start()
        injector.finish()
    finally:
        squatter.close()
    assert injector.invalid is not None
    assert f"kafka (127.0.0.1:{port}) did not come back after 3 attempts" in injector.invalid
    assert "already in use" in injector.invalid
    [record] = injector.records  # the second fault never fired
    assert record.recovered_s is None and record.error == injector.invalid
    assert not any("recovered" in line for line in said)
    assert said[-1].endswith("the run is invalid")


def test_restart_retries_then_succeeds() -> None:
    calls: list[int] = []

    def flaky() -> None:
        calls.append(1)
        if len(calls) < 3:
            raise OSError("not yet")

    faults.restart("svc", flaky, backoff_s=(0.0, 0.0))
    assert len(calls) == 3
    with pytest.raises(faults.ServiceLost, match=r"svc did not come back after 2 attempts.*always"):
        faults.restart("svc", lambda: (_ for _ in ()).throw(OSError("always")), backoff_s=(0.0,))


def test_an_invalid_run_reports_null_counts_and_its_reason() -> None:
    from cdc.verify.runner import invalid_run

    report = invalid_run("kafka did not come back")
    assert report["verdict"] == "invalid run" and report["ok"] is False
    assert report["lost"] is None and report["reason"] == "kafka did not come back"


def test_a_client_that_reaches_a_fault_waits_until_the_fault_has_begun() -> None:
    """Clients outrun faults: without the wait, every fault after the first would fire once the workload
    was over. A client reaching a fault's operation goes on only once that fault has begun."""
    import time

    injector = faults.FaultInjector(
        None,  # type: ignore[arg-type]  # the fault below fails before it needs the stack
        [],
        [],
        faults.FaultPlan([(3, "bogus")]),
        seed=1,
        say=lambda _m: None,
        hold_timeout_s=0.3,
    )
    began = time.monotonic()
    injector.progress(2)
    assert time.monotonic() - began < 0.1  # no fault due yet
    injector.progress(3)
    assert time.monotonic() - began >= 0.3  # due, not begun (the injector is not running): held
    injector.hold_timeout_s = 30.0
    injector.start()
    injector.progress(3)
    assert [r.kind for r in injector.records] == ["bogus"]  # it had begun when the client went on
    injector.finish()
    assert "unknown fault kind bogus" in (injector.records[0].error or "")
