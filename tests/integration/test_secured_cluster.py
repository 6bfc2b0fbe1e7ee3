"""The whole pipeline on secured services (`cdc infra up --secure`), and every way a security setting can be
wrong, as an operator meets it (issue 25).

One Kafka broker (SASL_SSL only, SCRAM users, the local CA) and one Cassandra node (PasswordAuthenticator,
TLS-only CQL port), under their own home and on their own ports below 32768 (above is the kernel's
ephemeral range), started once for the module and stopped at its end.

1. The full path: `cdc agent` (Kafka SASL_SSL SCRAM-SHA-512 with the CA and a client certificate whose key is
   encrypted; Cassandra with a role and a password over TLS; every secret a `file:` reference) → raw topic
   → `cdc worker` → clean topic, whose last images equal Cassandra's `SELECT` at ALL read over TLS;
   `cdc pipeline bootstrap` brings rows written before CDC over authenticated TLS, `cdc pipeline lake`
   reads the clean topics over SASL_SSL, and the lake tables equal `SELECT` at ALL.
   Before the agent and the worker first run right, each is started once with a wrong setting (an
   untrusted CA, an unknown user): it ends with the key to fix, and the restart with the right settings
   loses and repeats nothing. (A wrong *password* and a restart: tests/integration/test_worker_security.py
   and test_agent_security.py.)
2. One test per remaining error, each asserting the exit status and the message (the key to fix, what
   happened) of the quicker process for it: a plaintext client on the SASL_SSL port and a TLS client on a
   plaintext port, an expired server certificate (a TLS server in the test: the local broker's certificate
   is valid, and an expired *client* certificate is no error there, the broker only requests one and
   authenticates by SASL), a missing, unreadable or corrupt key file, an unknown Cassandra role and a
   client without TLS on Cassandra's TLS-only port.
3. Last: no password (Kafka's, Cassandra's, the client key's, the brokers' own) in any log, report, data
   file or error message of the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from cassandra import ConsistencyLevel
from cassandra.query import SimpleStatement

from cassandra_model.system_schema import load_schema_from_session
from cassandra_model.table_schema import TableSchema
from cdc.local_security import cassandra_config, cassandra_yaml, kafka_config, kafka_yaml
from cdc.verify.oracle import (
    by_key,
    chain_problems,
    compare,
    final_images,
    read_clean_topic,
    read_topic_records,
    select_rows,
)
from infra.secure import SecureLayout, SecureMaterial
from infra.settings import InfraSettings
from infra.stack import LocalStack
from pipeline.lake_reader import collect_lake_images
from pipeline.lake_schema import lake_table_path, normalize_json_form
from pipeline.table_catalog import load_table_schemas
from runtime.cassandra_session import cassandra_cluster
from runtime.config import KafkaConfig
from runtime.kafka_clients import make_admin, make_consumer, start_kafka_client
from runtime.kafka_topics import topic_partitions
from schemas.change_json import JsonChangeCodec
from schemas.raw_event import decode_raw_event
from tests.integration.agent_harness import AgentProcess, agent_config, unique_name, wait_until
from tests.integration.worker_harness import WorkerProcess, worker_config
from tests.unit.tls_material import TlsMaterial, make_tls_material

PORTS = {
    "kafka_port": 23392,
    "kafka_controller_port": 23393,
    "cql_port": 23342,
    "storage_port": 23300,
    "jmx_base_port": 23499,
}
#: the test's own TLS server, presenting an expired certificate
EXPIRED_SERVER_PORT = 23394
RAW_PARTITIONS = 3
ITEMS, LEGACY = "items", "legacy"
#: a role and a Kafka user that do not exist
INTRUDER = "intruder"


# ---------------------------------------------------------------------------------------------------------
# the secured services, and what the module's tests share


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    home = tmp_path_factory.mktemp("cdc-secured-cluster-home")
    services = LocalStack(InfraSettings.from_env(home=home, secure=True, **PORTS))
    try:
        services.up(report=lambda _msg: None)
        yield services
    finally:
        services.down(report=lambda _msg: None)


@dataclass(slots=True)
class Secured:
    """The module's deployment on the secured services: names, typed client configs, YAML sections for the
    child processes, and every process and message a secret must not show up in."""

    stack: LocalStack
    material: SecureMaterial
    workdir: Path
    foreign: TlsMaterial
    """certificates of another CA (untrusted by the services), and an expired server certificate"""
    session: Any
    keyspace: str = field(default_factory=lambda: unique_name("secured"))
    raw_topic: str = field(default_factory=lambda: unique_name("sec_raw"))
    schema_topic: str = field(default_factory=lambda: unique_name("sec_schemas"))
    app_id: str = field(default_factory=lambda: unique_name("sec_app"))
    prefix: str = field(default_factory=lambda: unique_name("sec_clean"))
    processes: list[AgentProcess] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    """every error message the tests saw (the grep at the end reads them)"""
    raw_events: int = 0
    """raw events the agent published for the writes to ITEMS"""

    @property
    def kafka(self) -> KafkaConfig:
        """The test's own Kafka clients: SASL_SSL as the bridge makes it (no client certificate)."""
        return kafka_config(
            self.material,
            raw_topic=self.raw_topic,
            schema_topic=self.schema_topic,
            raw_partitions=RAW_PARTITIONS,
        )

    def kafka_security(self, **changes: Any) -> dict[str, Any]:
        """`kafka.security` of the child processes: SASL_SSL SCRAM-SHA-512 with the CA and mutual TLS (the
        client key is encrypted); every secret a `file:` reference. `changes` replace keys (None: drop)."""
        section = {
            **kafka_yaml(self.material),
            "cert_file": str(self.material.client_cert),
            "key_file": str(self.material.client_key),
            "key_password": f"file:{self.material.key_password_file}",
        }
        return _changed(section, changes)

    def cassandra_section(self, *, tls: dict[str, Any] | None = None, **changes: Any) -> dict[str, Any]:
        """The `cassandra` section: the node, role `cdc` with its password file, TLS with the CA and the
        client certificate. `tls` replaces the tls section; `changes` replace other keys (None: drop)."""
        section: dict[str, Any] = {
            "contact_points": [self.material.cassandra_host],
            "port": self.material.cql_port,
            "keyspaces": [self.keyspace],
            **cassandra_yaml(self.material),
        }
        section["tls"] = (
            tls
            if tls is not None
            else {
                **section["tls"],
                "cert_file": str(self.material.client_cert),
                "key_file": str(self.material.client_key),
                "key_password": f"file:{self.material.key_password_file}",
            }
        )
        return _changed(section, changes)

    def agent(self, name: str, *, state: str = "agent-state", **security: Any) -> AgentProcess:
        """An agent (not started) of the deployment; `kafka_security` / `cassandra` replace its sections."""
        config = agent_config(
            cdc_raw=self.stack.node(1).spec.cdc_raw,
            state_directory=self.workdir / state,
            bootstrap=self.material.kafka_bootstrap,
            raw_topic=self.raw_topic,
            schema_topic=self.schema_topic,
            keyspaces=[self.keyspace],
            # processed segments are moved here, not deleted: an agent of an error test that wrongly ran
            # would show, and Cassandra's cdc_raw space is not filled
            archive_directory=self.workdir / "agent-archive",
            raw_partitions=RAW_PARTITIONS,
            agent={"schema_refresh_interval_s": 2},
        )
        config["kafka"]["security"] = security.get("kafka_security") or self.kafka_security()
        config["cassandra"] = security.get("cassandra") or self.cassandra_section()
        process = AgentProcess(self.workdir, config, name)
        self.processes.append(process)
        return process

    def worker(
        self, name: str, *, bootstrap: str | None = None, app_id: str | None = None, **security: Any
    ) -> WorkerProcess:
        """A worker (not started); the deployment's own with the defaults (data folder, app id and worker id
        shared by every start: a restart continues its predecessor's work)."""
        config = worker_config(
            bootstrap=bootstrap or self.material.kafka_bootstrap,
            raw_topic=self.raw_topic,
            schema_topic=self.schema_topic,
            raw_partitions=RAW_PARTITIONS,
            data_directory=self.workdir / f"{app_id or 'worker'}-data",
            app_id=app_id or self.app_id,
            worker_id="w1",
            topic_prefix=self.prefix,
            # a refusal must end the start at once; this bounds a test whose error is not recognised
            worker={"startup_timeout_s": 30, "expiry_interval_ms": 500},
        )
        config["kafka"]["security"] = security.get("kafka_security") or self.kafka_security()
        process = WorkerProcess(self.workdir, config, name)
        self.processes.append(process)
        return process

    def pipeline_config(self) -> Path:
        """The YAML of `cdc pipeline` jobs on the deployment."""
        path = self.workdir / "pipeline.yaml"
        path.write_text(
            yaml.safe_dump(
                {
                    "cluster": "acceptance",
                    "kafka": {
                        "bootstrap_servers": self.material.kafka_bootstrap,
                        "raw_topic": self.raw_topic,
                        "schema_topic": self.schema_topic,
                        "raw_partitions": RAW_PARTITIONS,
                        "security": self.kafka_security(key_file=str(self.spark_client_key())),
                    },
                    "cassandra": self.cassandra_section(),
                    "pipeline": {
                        "lake_directory": str(self.workdir / "lake"),
                        "clean_topic_prefix": self.prefix,
                        "bootstrap_splits": 4,
                        "shuffle_partitions": 2,
                        "trigger_interval_s": 1,
                    },
                },
                sort_keys=False,
            )
        )
        return path

    def spark_client_key(self) -> Path:
        """The client key re-encrypted with PBE-SHA1-3DES under the same password, for the Spark jobs:
        their Java Kafka client cannot decrypt the PBES2 key `cdc infra up --secure` makes (it says so, and
        how to convert it, which is done here; the password goes to openssl by file and stdin only)."""
        converted = self.workdir / "client-3des.key"
        if not converted.exists():
            done = subprocess.run(
                ["openssl", "pkcs8", "-topk8", "-v1", "PBE-SHA1-3DES", "-in", str(self.material.client_key),
                 "-passin", f"file:{self.material.key_password_file}", "-passout", "stdin", "-out",
                 str(converted)],
                input=self.material.key_password() + "\n",
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
            converted.chmod(0o600)
        return converted

    def clean_topic(self, table: str) -> str:
        return f"{self.prefix}.{self.keyspace}.{table}"

    def schema(self, table: str) -> TableSchema:
        catalog = load_schema_from_session(self.session, [self.keyspace], with_system_schema=False)
        found = catalog.by_name(self.keyspace, table)
        assert found is not None, f"{self.keyspace}.{table} is not in system_schema"
        return found


def _changed(section: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    out = dict(section)
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


@pytest.fixture(scope="module")
def secured(stack: LocalStack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    material = stack.secure_material()
    workdir = tmp_path_factory.mktemp("secured-run")
    foreign = make_tls_material(tmp_path_factory.mktemp("foreign-tls"))
    # the test reads Cassandra over TLS with the role's password, at ALL
    cluster = cassandra_cluster(
        cassandra_config(material), protocol_version=5, connect_timeout=10, control_connection_timeout=10
    )
    cluster.profile_manager.default.consistency_level = ConsistencyLevel.ALL
    run = Secured(stack, material, workdir, foreign, cluster.connect())
    try:
        yield run
    finally:
        for process in run.processes:
            process.ensure_stopped()
        cluster.shutdown()


# ---------------------------------------------------------------------------------------------------------
# helpers


def _execute(session: Any, statements: list[tuple[str, tuple[Any, ...]]]) -> int:
    for text, args in statements:
        session.execute(SimpleStatement(text, consistency_level=ConsistencyLevel.ALL), args)
    return len(statements)


@dataclass(slots=True, frozen=True)
class Exit:
    """How a process that had to fail ended: its exit status and its log (stdout and stderr)."""

    code: int
    log: str
    seconds: float

    @property
    def error(self) -> str:
        """The last `cdc: error:` line (what an operator reads), or the log's tail."""
        lines = [line for line in self.log.splitlines() if line.startswith("cdc: error:")]
        return lines[-1] if lines else self.log[-3000:]


def _must_fail(run: Secured, process: AgentProcess, timeout_s: float = 90.0) -> Exit:
    """Start `process` (its config is wrong) and wait for its exit; fails if it keeps running."""
    started = time.monotonic()
    process.start()
    assert process.process is not None
    try:
        code = process.process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        raise AssertionError(
            f"{process.name} still ran {timeout_s:.0f} s after its start with a wrong setting:\n"
            f"{process.log_tail(40)}"
        ) from None
    seconds = time.monotonic() - started
    log = process.log_text()
    exit_ = Exit(code, log, seconds)
    run.messages.append(exit_.error)
    return exit_


def _assert_refused(exit_: Exit, *phrases: str) -> None:
    """Exit status 2 (`cdc: error:`, not a crash), and the message says each phrase."""
    assert exit_.code == 2, f"exit status {exit_.code} with a wrong setting:\n{exit_.log[-3000:]}"
    assert exit_.error.startswith("cdc: error:"), f"no `cdc: error:` line:\n{exit_.log[-3000:]}"
    missing = [p for p in phrases if p not in exit_.error]
    assert not missing, f"the message does not say {missing}:\n{exit_.error}"


async def _group_lag(kafka: KafkaConfig, group: str, topic: str) -> int:
    admin = make_admin(kafka)
    await start_kafka_client(admin, kafka)
    try:
        committed = await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()
    consumer = make_consumer(kafka)
    await start_kafka_client(consumer, kafka)
    try:
        ends = await consumer.end_offsets(await topic_partitions(consumer, topic))
    finally:
        await consumer.stop()
    lag = 0
    for tp, end in ends.items():
        meta = committed.get(tp)
        lag += end - (meta.offset if meta is not None and meta.offset >= 0 else 0)
    return lag


def _wait_idle(run: Secured, worker: WorkerProcess, timeout_s: float = 120.0) -> None:
    """Until the worker's group has committed every raw record (over SASL_SSL)."""
    wait_until(
        lambda: (
            worker.check_alive() is None
            and asyncio.run(_group_lag(run.kafka, run.app_id, run.raw_topic)) == 0
        ),
        timeout_s,
        worker.log_tail,
        interval_s=0.5,
    )


def _raw_positions(run: Secured) -> list[tuple[str, int, int]]:
    """(table, segment id, entry offset) of every raw event of the raw topic."""
    out = []
    for _, _, _, _, value in asyncio.run(read_topic_records(run.kafka, run.raw_topic)):
        assert value is not None
        event = decode_raw_event(value)
        out.append((event["table"], event["source"]["segment_id"], event["source"]["entry_offset"]))
    return out


def _run_pipeline(run: Secured, job: str, *args: str, timeout_s: float = 300.0) -> str:
    """`cdc pipeline JOB --config FILE ARGS` as a child process; its output (kept for the grep)."""
    log = run.workdir / f"pipeline-{job}.log"
    with log.open("wb") as out:
        done = subprocess.run(
            [sys.executable, "-m", "cdc", "pipeline", job, "--config", str(run.pipeline_config()), *args],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=timeout_s,
            check=False,
            env={k: v for k, v in os.environ.items() if not k.startswith("CDC__")},
        )
    text = log.read_text(errors="replace")
    assert done.returncode == 0, f"cdc pipeline {job} exited with {done.returncode}:\n{text[-4000:]}"
    return text


# ---------------------------------------------------------------------------------------------------------
# 1. the full path


def _item_writes_before(ks: str) -> list[tuple[str, tuple[Any, ...]]]:
    table = f"{ks}.{ITEMS}"
    writes: list[tuple[str, tuple[Any, ...]]] = [
        (
            f"INSERT INTO {table} (id, name, score, ratio, tags, attrs) VALUES (%s, %s, %s, %s, %s, %s)",
            (i, f"name{i}", i * 100, i / 4, {f"t{i % 3}", "all"}, {"a": i}),
        )
        for i in range(12)
    ]
    writes.append(
        (f"INSERT INTO {table} (id, name, tags) VALUES (%s, %s, %s) USING TTL 3600", (12, "ttl", {"x"}))
    )
    return writes


def _item_writes_after(ks: str) -> list[tuple[str, tuple[Any, ...]]]:
    table = f"{ks}.{ITEMS}"
    return [
        (f"UPDATE {table} SET name = %s WHERE id = %s", ("renamed", 1)),
        (f"UPDATE {table} SET score = %s, ratio = %s WHERE id = %s", (999, -0.5, 2)),
        (f"UPDATE {table} SET tags = tags + %s WHERE id = %s", ({"new"}, 4)),
        (f"UPDATE {table} SET tags = tags - %s WHERE id = %s", ({"all"}, 5)),
        (f"UPDATE {table} SET attrs[%s] = %s WHERE id = %s", ("b", 7, 6)),
        (f"DELETE attrs[%s] FROM {table} WHERE id = %s", ("a", 6)),
        (f"UPDATE {table} SET tags = %s WHERE id = %s", ({"replaced"}, 7)),
        (f"DELETE FROM {table} WHERE id = %s", (3,)),
        (f"DELETE name FROM {table} WHERE id = %s", (8,)),
        (f"INSERT INTO {table} (id, name) VALUES (%s, %s)", (20, "late")),
        (f"UPDATE {table} SET name = %s WHERE id = %s", ("made by an update", 21)),
        (f"INSERT INTO {table} (id, name, score) VALUES (%s, %s, %s) USING TTL 3600", (22, "ttl2", 5)),
    ]


def _legacy_writes(ks: str) -> list[tuple[str, tuple[Any, ...]]]:
    """Rows of a table without CDC (yet): no raw event will ever describe them; the bootstrap must."""
    table = f"{ks}.{LEGACY}"
    writes: list[tuple[str, tuple[Any, ...]]] = [
        (
            f"INSERT INTO {table} (id, label, qty, nums, meta) VALUES (%s, %s, %s, %s, %s)",
            (i, f"old{i}", i * 3, [i, i + 1], {"k": f"v{i}"}),
        )
        for i in range(8)
    ]
    writes.append((f"UPDATE {table} SET nums = nums + %s WHERE id = %s", ([99], 2)))
    writes.append((f"UPDATE {table} USING TTL 7200 SET label = %s WHERE id = %s", ("expiring", 4)))
    return writes


def test_agent_refused_then_restarted_publishes_every_write_once(secured: Secured) -> None:
    """Agent → Kafka SASL_SSL, reading Cassandra's schema over TLS with a password. Its first start trusts
    another CA: it ends at once naming kafka.security.ca_file; the restart with the right CA publishes each
    write exactly once, those made before it and after."""
    run, ks = secured, secured.keyspace
    run.session.execute(
        f"CREATE KEYSPACE {ks} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}"
    )
    run.session.execute(
        f"CREATE TABLE {ks}.{ITEMS} (id int PRIMARY KEY, name text, score bigint, ratio double, "
        "tags set<text>, attrs map<text, int>) WITH cdc = true"
    )
    run.session.execute(
        f"CREATE TABLE {ks}.{LEGACY} (id int PRIMARY KEY, label text, qty int, nums list<int>, "
        "meta map<text, text>) WITH cdc = false"
    )
    _execute(run.session, _legacy_writes(ks))
    written = _execute(run.session, _item_writes_before(ks))

    untrusted = run.agent(
        "agent-untrusted-ca", kafka_security=run.kafka_security(ca_file=str(run.foreign.ca))
    )
    refused = _must_fail(run, untrusted)
    _assert_refused(refused, "kafka.security.ca_file", "not trusted", str(run.foreign.ca))
    assert "Traceback" not in refused.log, refused.log[-3000:]

    agent = run.agent("agent")
    agent.start()
    agent.wait_healthy(90)
    written += _execute(run.session, _item_writes_after(ks))

    wait_until(
        lambda: agent.check_alive() is None and len(_raw_positions(run)) >= written,
        90,
        lambda: (
            f"the agent to publish {written} raw events (got {len(_raw_positions(run))}):\n{agent.log_tail()}"
        ),
        interval_s=1.0,
    )
    time.sleep(2.0)  # a repeated send would show up by now
    positions = _raw_positions(run)
    assert Counter(table for table, _, _ in positions) == {ITEMS: written}, (
        f"{len(positions)} raw events for {written} writes to {ITEMS} (no other table is captured yet)"
    )
    assert len(set(positions)) == len(positions), "a commit-log entry was published twice"
    run.raw_events = len(positions)


def test_worker_refused_then_restarted_emits_each_change_once_equal_to_select_at_all(
    secured: Secured,
) -> None:
    """Worker over SASL_SSL with mutual TLS. Its first start logs in as an unknown user: it ends at once
    naming kafka.security.username; the restart (same worker id, data folder and group) turns every raw
    event into one change each, and the last images equal Cassandra's rows at ALL."""
    run = secured
    assert run.raw_events, "the agent test did not run first"
    intruder = run.worker("worker-unknown-user", kafka_security=run.kafka_security(username=INTRUDER))
    refused = _must_fail(run, intruder)
    _assert_refused(refused, "kafka.security.username", repr(INTRUDER), "wrong password or unknown user")
    assert refused.seconds < 60, f"a refused login was retried for {refused.seconds:.0f} s"

    worker = run.worker("worker")
    worker.start()
    worker.wait_healthy(90)
    _wait_idle(run, worker)
    events = read_clean_topic(run.kafka, run.clean_topic(ITEMS), JsonChangeCodec())
    problems = [p for history in by_key(events).values() for p in chain_problems(history)]
    assert not problems, f"broken histories (a lost or repeated change): {problems[:5]}"
    difference = compare(select_rows(run.session, run.schema(ITEMS)), final_images(events))
    assert difference.clean, difference.summary(3)
    status, stats = worker.rest("/stats")
    assert status == 200, stats
    assert stats["total"]["in"] == run.raw_events, f"raw events merged {stats['total']} != {run.raw_events}"
    assert stats["total"]["emitted"] == sum(1 for e in events if e.value is not None), stats["total"]
    assert {e.value["op"] for e in events if e.value is not None} >= {"c", "u", "d"}


def test_bootstrap_over_authenticated_tls_reads_rows_written_before_cdc(secured: Secured) -> None:
    """`cdc pipeline bootstrap` scans Cassandra with the role's password over TLS and publishes over
    SASL_SSL: every pre-CDC row reaches the clean topic as one `r` event whose image is `SELECT` at ALL."""
    run = secured
    worker = next(p for p in run.processes if p.name == "worker")
    run.session.execute(f"ALTER TABLE {run.keyspace}.{LEGACY} WITH cdc = true")
    wait_until(
        lambda: (run.keyspace, LEGACY) in load_table_schemas(run.kafka),
        60,
        "the agent to publish the legacy table's schema",
        interval_s=1.0,
    )
    output = _run_pipeline(run, "bootstrap", "--tables", f"{run.keyspace}.{LEGACY}")
    expected = select_rows(run.session, run.schema(LEGACY))
    assert len(expected) == 8, expected

    def histories() -> dict[str, list[Any]]:
        events = read_clean_topic(run.kafka, run.clean_topic(LEGACY), JsonChangeCodec())
        return {k: [e for e in h if e.value is not None] for k, h in by_key(events).items()}

    wait_until(lambda: len(histories()) >= len(expected), 90, worker.log_tail, interval_s=1.0)
    _wait_idle(run, worker)
    got = histories()
    assert set(got) == set(expected), f"keys differ: {set(got) ^ set(expected)}\n{output[-2000:]}"
    for key, history in got.items():
        assert [e.value["op"] for e in history] == ["r"], f"{key}: {[e.value for e in history]}"
        assert history[0].value["after"] == expected[key], f"{key}: {history[0].value} != {expected[key]}"


def test_lake_over_sasl_ssl_equals_select_at_all(secured: Secured, spark: Any) -> None:
    """`cdc pipeline lake --once` reads the clean topics over SASL_SSL (mutual TLS, the key's password from
    a file); each Delta table equals Cassandra's `SELECT` at ALL."""
    run = secured
    _run_pipeline(run, "lake", "--once")
    for table in (ITEMS, LEGACY):
        schema = run.schema(table)
        expected = {k: normalize_json_form(schema, v) for k, v in select_rows(run.session, schema).items()}
        got = collect_lake_images(spark, lake_table_path(run.workdir / "lake", run.keyspace, table), schema)
        assert expected, f"{table}: no rows to compare"
        assert got == expected, (
            f"{table}: missing {sorted(set(expected) - set(got))[:3]}, extra {sorted(set(got) - set(expected))[:3]}, "
            f"wrong {[(expected[k], got[k]) for k in set(got) & set(expected) if got[k] != expected[k]][:2]}"
        )


# ---------------------------------------------------------------------------------------------------------
# 2. every other error: exit status and message


def _error_app() -> str:
    return unique_name("sec_err")


def test_plaintext_client_on_the_sasl_ssl_port(secured: Secured) -> None:
    run = secured
    exit_ = _must_fail(
        run, run.worker("worker-plaintext", app_id=_error_app(), kafka_security={"protocol": "PLAINTEXT"})
    )
    _assert_refused(exit_, "kafka.security.protocol", run.material.kafka_bootstrap)


def test_tls_client_on_a_plaintext_port(secured: Secured) -> None:
    """The broker's controller listener is PLAINTEXT: a SASL_SSL client's handshake gets no TLS answer."""
    run = secured
    plaintext = f"127.0.0.1:{PORTS['kafka_controller_port']}"
    exit_ = _must_fail(run, run.worker("worker-tls-on-plaintext", bootstrap=plaintext, app_id=_error_app()))
    _assert_refused(exit_, "kafka.security.protocol", plaintext, "TLS")


@contextlib.contextmanager
def _tls_server(cert: Path, key: Path, port: int) -> Iterator[None]:
    """A TLS server on 127.0.0.1:`port` presenting `cert`: it only shakes hands (and is refused)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(cert), str(key))
    server = socket.create_server(("127.0.0.1", port))
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except (TimeoutError, OSError):
                continue
            conn.settimeout(5)
            with contextlib.suppress(OSError), context.wrap_socket(conn, server_side=True) as tls:
                tls.recv(1)
            conn.close()

    thread = threading.Thread(target=serve, name="expired-tls-server", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(5)
        server.close()


def test_expired_server_certificate(secured: Secured) -> None:
    """A server whose certificate (signed by a CA the client trusts) has expired."""
    run = secured
    endpoint = f"127.0.0.1:{EXPIRED_SERVER_PORT}"
    with _tls_server(run.foreign.expired_cert, run.foreign.expired_key, EXPIRED_SERVER_PORT):
        exit_ = _must_fail(
            run,
            run.worker(
                "worker-expired-server",
                bootstrap=endpoint,
                app_id=_error_app(),
                kafka_security=run.kafka_security(ca_file=str(run.foreign.ca), cert_file=None, key_file=None,
                                                  key_password=None),
            ),
        )  # fmt: skip
    _assert_refused(exit_, endpoint, "expired")


def test_missing_key_file(secured: Secured) -> None:
    """Found when the config is loaded: nothing starts."""
    run = secured
    missing = run.workdir / "no-such-client.key"
    exit_ = _must_fail(
        run,
        run.worker(
            "worker-missing-key",
            app_id=_error_app(),
            kafka_security=run.kafka_security(key_file=str(missing)),
        ),
    )
    _assert_refused(exit_, "config key kafka.security.key_file", str(missing), "does not exist")


def test_unreadable_key_file(secured: Secured) -> None:
    """A key file the process may not read (root reads every file: then a folder in its place)."""
    run = secured
    unreadable = run.workdir / "unreadable-client.key"
    if os.geteuid() == 0:
        unreadable.mkdir()
        phrase = "is a directory"
    else:
        shutil.copyfile(run.material.client_key, unreadable)
        unreadable.chmod(0)
        phrase = "permission denied"
    exit_ = _must_fail(
        run,
        run.worker(
            "worker-unreadable-key",
            app_id=_error_app(),
            kafka_security=run.kafka_security(key_file=str(unreadable)),
        ),
    )
    _assert_refused(exit_, "config key kafka.security.key_file", str(unreadable), phrase)


def test_key_file_that_holds_no_key(secured: Secured) -> None:
    """A file that is readable but is no PEM private key: found when the TLS context is made."""
    run = secured
    garbage = run.workdir / "garbage-client.key"
    garbage.write_text(
        "-----BEGIN ENCRYPTED PRIVATE KEY-----\nbm90IGEga2V5\n-----END ENCRYPTED PRIVATE KEY-----\n"
    )
    exit_ = _must_fail(
        run,
        run.worker(
            "worker-garbage-key",
            app_id=_error_app(),
            kafka_security=run.kafka_security(key_file=str(garbage)),
        ),
    )
    _assert_refused(exit_, "kafka.security.key", str(garbage))


def test_unknown_cassandra_role(secured: Secured) -> None:
    run = secured
    exit_ = _must_fail(
        run,
        run.agent(
            "agent-unknown-role",
            state="agent-unknown-role-state",
            cassandra=run.cassandra_section(username=INTRUDER),
        ),
    )
    _assert_refused(exit_, "cassandra.username", repr(INTRUDER), "wrong password or unknown role")


def test_cassandra_client_without_tls_on_the_tls_port(secured: Secured) -> None:
    run = secured
    exit_ = _must_fail(
        run,
        run.agent(
            "agent-no-tls",
            state="agent-no-tls-state",
            cassandra=run.cassandra_section(tls={"enabled": False}),
        ),
    )
    _assert_refused(exit_, "cassandra.tls.enabled", str(run.material.cql_port))


# ---------------------------------------------------------------------------------------------------------
# 3. no secret anywhere


def test_no_password_in_any_log_report_or_message(secured: Secured) -> None:
    """After every run above: the services' logs, the agents' and workers' logs, configs, state and data
    folders (offsets, quarantine reports, RocksDB, the lake and its checkpoints), the pipeline jobs' output
    and every error message hold no password."""
    run = secured
    layout = SecureLayout.of(run.stack.settings)
    secrets = {
        "kafka password": run.material.kafka_password(),
        "cassandra password": run.material.cassandra_password(),
        "client key password": run.material.key_password(),
        "broker password": layout.kafka_broker_password.read_text().strip(),
        "keystore password": layout.keystore_password.read_text().strip(),
    }
    assert all(len(v) >= 16 for v in secrets.values())
    assert len(run.messages) >= 10 and all(run.messages), run.messages
    assert len({p.name for p in run.processes}) >= 12, "fewer processes ran than the tests start"
    scanned = 0
    hits: list[str] = []
    for root in (run.stack.settings.logs, run.workdir):
        for folder, _dirs, names in os.walk(root):
            for name in names:
                path = Path(folder) / name
                if not path.is_file():
                    continue
                content = path.read_bytes()
                scanned += 1
                hits += [f"{what} in {path}" for what, value in secrets.items() if value.encode() in content]
    for message in run.messages:
        hits += [f"{what} in the message {message!r}" for what, value in secrets.items() if value in message]
    assert scanned > 50, f"only {scanned} files were read"
    assert not hits, hits
