"""Fixtures for the Kafka Connect tests: a throwaway PostgreSQL and a standalone Connect worker.

PostgreSQL is module-scoped (one server per test module); a test starts its own Connect worker with the
connectors it needs (`start_connect([sink_into(postgres, ...)])`) and reads the tables they fill
(`table_rows`). Import the fixtures into a test module (`from tests.integration.connect_fixtures import
postgres_fixture, start_connect_fixture`); tests then ask for `postgres` and `start_connect`. Ports are
fixed (below the ephemeral range) and moved with CDC_TEST_POSTGRES_PORT and CDC_TEST_CONNECT_PORT when
two test sessions share the machine.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from infra.connect import Connector, ConnectSpec, ConnectWorker, connect_plugin_path, jdbc_sink
from infra.postgres import PostgresServer, temporary_postgres
from infra.settings import InfraSettings

psycopg = pytest.importorskip("psycopg", reason="needs pip install 'psycopg[binary]' (the dev extra)")
from psycopg.types import TypeInfo  # noqa: E402 (psycopg is optional until here)
from psycopg.types.hstore import register_hstore  # noqa: E402

POSTGRES_PORT = int(os.environ.get("CDC_TEST_POSTGRES_PORT", "23432"))
CONNECT_PORT = int(os.environ.get("CDC_TEST_CONNECT_PORT", "23083"))


@pytest.fixture(scope="module", name="postgres")
def postgres_fixture(infra_settings: InfraSettings) -> Iterator[PostgresServer]:
    """A PostgreSQL server in a temporary folder, on 127.0.0.1:POSTGRES_PORT."""
    with temporary_postgres(POSTGRES_PORT, start_timeout_s=infra_settings.start_timeout_s) as server:
        yield server


@pytest.fixture(name="start_connect")
def start_connect_fixture(
    kafka_bootstrap: str, infra_settings: InfraSettings, tmp_path: Path
) -> Iterator[Callable[[Sequence[Connector]], ConnectWorker]]:
    """Starts a standalone Connect worker on the session's Kafka with the given connectors (the JDBC sink
    and the registry's converters are on its plugin path); every worker started is stopped after the test.

    Connectors are given at start, not added over REST: Kafka 3.9's standalone worker never creates the
    tasks of a connector PUT over REST whose converter comes from plugin.path (Apicurio's AvroConverter).
    """
    started: list[ConnectWorker] = []

    def start(connectors: Sequence[Connector]) -> ConnectWorker:
        spec = ConnectSpec(
            root=tmp_path / f"connect-{len(started)}",
            bootstrap=kafka_bootstrap,
            port=CONNECT_PORT,
            plugin_path=connect_plugin_path(infra_settings),
        )
        worker = ConnectWorker(spec, infra_settings)
        started.append(worker)
        worker.start(connectors)
        return worker

    try:
        yield start
    finally:
        for worker in started:
            worker.stop()


def sink_into(postgres: PostgresServer, name: str, topics: Sequence[str], **overrides: str) -> Connector:
    """A JDBC sink of `topics` into `postgres` (upserts and deletes by record key, committed records only)."""
    return jdbc_sink(
        name,
        topics_regex="|".join(re.escape(t) for t in topics),
        jdbc_url=postgres.spec.jdbc_url,
        username=postgres.spec.user,
        **overrides,
    )


def create_extension(postgres: PostgresServer, name: str) -> None:
    """`CREATE EXTENSION` in the sink's database: the JDBC sink stores a map with text keys as `hstore`."""
    with psycopg.connect(postgres.spec.conninfo, autocommit=True) as conn:
        conn.execute(f'CREATE EXTENSION IF NOT EXISTS "{name}"')


def table_name(topic: str) -> str:
    """The table the sink makes of a topic (`collection.name.format=${topic}`: dots become underscores)."""
    return topic.replace(".", "_")


def table_rows(postgres: PostgresServer, table: str) -> list[dict[str, Any]] | None:
    """Every row of `table` as a dict, in primary-key order; None while the sink has not created it."""
    with psycopg.connect(postgres.spec.conninfo, autocommit=True) as conn:
        hstore = TypeInfo.fetch(conn, "hstore")
        if hstore is not None:  # maps stored as hstore read as dicts
            register_hstore(hstore, conn)
        exists = conn.execute("SELECT to_regclass(%s)", (f'public."{table}"',)).fetchone()[0]
        if exists is None:
            return None
        keys = primary_key(conn, table)
        order = ", ".join(f'"{k}"' for k in keys) or "1"
        cursor = conn.execute(f'SELECT * FROM public."{table}" ORDER BY {order}')
        names = [c.name for c in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def primary_key(conn: Any, table: str) -> list[str]:
    rows = conn.execute(
        "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
        "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = %s::regclass AND i.indisprimary",
        (f'public."{table}"',),
    ).fetchall()
    return [r[0] for r in rows]


def column_types(postgres: PostgresServer, table: str) -> dict[str, str]:
    """PostgreSQL's type of each column of `table`, as `format_type` spells it (`text[]`, `hstore`)."""
    with psycopg.connect(postgres.spec.conninfo, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
            "WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped",
            (f'public."{table}"',),
        ).fetchall()
    return dict(rows)


def wait_for_rows(
    worker: ConnectWorker,
    connector: str,
    postgres: PostgresServer,
    table: str,
    expected: Any,
    *,
    timeout_s: float = 120,
    transform: Any = None,
) -> float:
    """Poll the table until its rows (through `transform`) equal `expected`; fail fast if the sink failed.

    The failure message holds the difference and the connector's state, not just a timeout.
    """
    started = time.monotonic()
    got: Any = None
    while True:
        failures = worker.failures(connector)
        assert not failures, f"the JDBC sink {connector!r} failed:\n" + "\n".join(failures)
        rows = table_rows(postgres, table)
        got = transform(rows) if transform is not None and rows is not None else rows
        if got == expected:
            return time.monotonic() - started
        if time.monotonic() - started > timeout_s:
            raise AssertionError(
                f"table {table} did not reach the expected rows within {timeout_s:.0f} s:\n"
                f"expected: {expected!r}\ngot:      {got!r}\nconnector status: {worker.status(connector)}"
            )
        time.sleep(0.5)
