"""examples/faust_consumer.py as a real Faust worker on real clean topics, for each encoding.

A real `cdc worker` merges raw events (built by the test kit) into a clean topic, in its transactions;
between two of its batches the test writes a change of its own in a transaction it aborts. Then the
example runs as `python examples/faust_consumer.py ... worker` and must print every committed record of
the topic, in order, as the oracle's read_committed reader decodes it (tombstone included), and never the
aborted one. Avro goes through the session's real schema registry.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from cassandra_model.ddl_parser import load_schema_from_cql
from cassandra_model.table_schema import TableSchema
from cdc.verify.oracle import read_clean_topic, read_topic_records
from infra.registry import SchemaRegistry
from runtime.config import KafkaConfig
from runtime.kafka_topics import TopicSpec, ensure_topics
from schemas.change_avro import AvroChangeCodec
from schemas.change_codec import ChangeCodec
from schemas.change_connect_json import ConnectJsonChangeCodec
from schemas.change_json import JsonChangeCodec
from schemas.registry_client import HttpSchemaRegistryClient
from schemas.schema_event import schema_event
from testkit.event_builder import DeleteRow, EventBuilder, Operation, Write
from tests.integration.agent_harness import unique_name, wait_until
from tests.integration.worker_harness import WorkerProcess, publish_schema_event, worker_config
from tests.unit.app.support import raw_record

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "faust_consumer.py"
#: the ports this module's children listen on (below the ephemeral range, where the test plan puts them)
PORTS = range(27100, 28000)

#: the worker's first batches: c 1, c 2, u 1, c 3
FIRST = [
    Write(1, values={"name": "one", "qty": 1, "paid": False}, ts=1_000, insert=True),
    Write(2, values={"name": "two", "qty": 2, "paid": False}, ts=1_001, insert=True),
    Write(1, values={"qty": 5}, ts=1_002),
    Write(3, values={"name": "three", "qty": 3, "paid": False}, ts=1_003, insert=True),
]
#: after the aborted transaction: d 1 and its tombstone, u 3
SECOND = [DeleteRow(1, ts=2_000), Write(3, values={"paid": True}, ts=2_001)]


def free_port() -> int:
    for port in PORTS:
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError(f"no free port in {PORTS.start}-{PORTS.stop - 1}")


@dataclass(slots=True)
class Deployment:
    """One table's topics and worker config, and the codec the worker writes its clean topic with."""

    bootstrap: str
    keyspace: str
    ddl: str
    schema: TableSchema
    raw_topic: str
    schema_topic: str
    prefix: str
    encoding: str
    registry_url: str | None
    codec: ChangeCodec

    @property
    def clean_topic(self) -> str:
        return f"{self.prefix}.{self.keyspace}.orders"

    async def produce_raw(self, ops: list[Operation]) -> None:
        builder = EventBuilder(self.schema)
        producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, acks="all")
        await producer.start()
        try:
            for op in ops:
                record = raw_record(0, 0, self.schema, builder.event(op))
                await producer.send_and_wait(self.raw_topic, record.value, key=record.key, partition=0)
        finally:
            await producer.stop()

    async def abort_a_change(self, envelope: dict[str, Any]) -> None:
        """Write a change of key 999 to the clean topic in a transaction, and abort it."""
        phantom = {**envelope, "after": {**envelope["after"], "id": 999, "name": "phantom"}}
        key = self.codec.encode_key(self.schema, {"id": 999})
        value = self.codec.encode_value(self.schema, phantom)
        producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, transactional_id=unique_name("phantom"))
        await producer.start()
        try:
            await producer.begin_transaction()
            await producer.send_and_wait(self.clean_topic, value, key=key, partition=0)
            await producer.abort_transaction()
        finally:
            await producer.stop()


async def deploy(bootstrap: str, encoding: str, registry_url: str | None) -> Deployment:
    keyspace = unique_name("faust")
    ddl = (
        f"CREATE TABLE {keyspace}.orders (id int PRIMARY KEY, name text, qty bigint, paid boolean) "
        f"WITH ID = {uuid.uuid4()}"
    )
    schema = load_schema_from_cql(ddl).by_name(keyspace, "orders")
    assert schema is not None
    prefix = unique_name("clean")
    codec: ChangeCodec = JsonChangeCodec()
    if encoding == "avro":
        assert registry_url is not None
        codec = AvroChangeCodec(HttpSchemaRegistryClient(registry_url), prefix)
    elif encoding == "json_schema":
        codec = ConnectJsonChangeCodec(prefix)
    dep = Deployment(
        bootstrap, keyspace, ddl, schema, unique_name("raw"), unique_name("schemas"), prefix, encoding,
        registry_url, codec,
    )  # fmt: skip
    kafka = KafkaConfig(bootstrap_servers=bootstrap)
    await ensure_topics(
        kafka,
        [TopicSpec(dep.raw_topic, 1, 1), TopicSpec(dep.schema_topic, 1, 1, {"cleanup.policy": "compact"})],
    )
    event = schema_event(
        "acceptance", keyspace, "orders", str(schema.table_id), cdc=True, dropped=False, cql=ddl
    )
    await publish_schema_event(bootstrap, dep.schema_topic, event)
    return dep


@pytest.fixture
def running() -> Iterator[list[WorkerProcess | subprocess.Popen[bytes]]]:
    """Every child a test starts, killed at its end whatever happened."""
    children: list[WorkerProcess | subprocess.Popen[bytes]] = []
    yield children
    for child in children:
        if isinstance(child, WorkerProcess):
            child.kill()
        elif child.poll() is None:
            child.kill()
            child.wait(10)


def committed_records(bootstrap: str, topic: str) -> int:
    return len(asyncio.run(read_topic_records(bootstrap, topic, stable_wait_s=30)))


def run_worker(dep: Deployment, workdir: Path, running: list[Any]) -> WorkerProcess:
    worker: dict[str, Any] = {"encoding": dep.encoding, "clean_partitions": 1, "web_port": free_port()}
    if dep.registry_url is not None:
        worker["schema_registry_url"] = dep.registry_url
    config = worker_config(
        bootstrap=dep.bootstrap,
        raw_topic=dep.raw_topic,
        schema_topic=dep.schema_topic,
        raw_partitions=1,
        data_directory=workdir / "worker-data",
        app_id=unique_name("app"),
        worker_id="w1",
        topic_prefix=dep.prefix,
        worker=worker,
    )
    process = WorkerProcess(workdir, config, name="worker")
    running.append(process)
    process.start()
    return process


def wait_for_records(dep: Deployment, worker: WorkerProcess, count: int) -> None:
    def enough() -> bool:
        assert worker.running, f"the worker exited:\n{worker.log_tail()}"
        return committed_records(dep.bootstrap, dep.clean_topic) >= count

    wait_until(enough, 120, lambda: f"{count} records on {dep.clean_topic}:\n{worker.log_tail()}", 1.0)


def expected_lines(dep: Deployment) -> list[dict[str, Any]]:
    """Every committed record of the clean topic, as the example prints it (decoded by the oracle)."""
    lines = []
    for event in read_clean_topic(dep.bootstrap, dep.clean_topic, dep.codec):
        line: dict[str, Any] = {"partition": event.partition, "offset": event.offset, "key": event.key}
        if event.value is None:
            line.update(tombstone=True, op=None, before=None, after=None, source=None, ts_ms=None)
        else:
            line.update(tombstone=False, **event.value)
        lines.append(json.loads(json.dumps(line)))
    return lines


def printed_lines(path: Path) -> list[dict[str, Any]]:
    text = path.read_text(errors="replace") if path.exists() else ""
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


@pytest.mark.parametrize(("encoding", "typed"), [("json", False), ("json_schema", True), ("avro", True)])
def test_example_prints_every_committed_change_and_never_an_aborted_one(
    encoding: str,
    typed: bool,
    kafka_bootstrap: str,
    running: list[Any],
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    registry_url = None
    if encoding == "avro":  # the registry starts only for the test that needs it
        registry: SchemaRegistry = request.getfixturevalue("schema_registry")
        registry_url = registry.spec.ccompat_url
    dep = asyncio.run(deploy(kafka_bootstrap, encoding, registry_url))

    # the worker's transactions, an aborted one of ours, the worker's again
    asyncio.run(dep.produce_raw(FIRST))
    worker = run_worker(dep, tmp_path, running)
    wait_for_records(dep, worker, 4)
    first = read_clean_topic(dep.bootstrap, dep.clean_topic, dep.codec)
    assert first[0].value is not None
    asyncio.run(dep.abort_a_change(first[0].value))
    asyncio.run(dep.produce_raw(SECOND))
    wait_for_records(dep, worker, 7)
    assert worker.stop() == 0
    expected = expected_lines(dep)
    assert len(expected) == 7

    # the example, as a real Faust worker
    command = [
        sys.executable, str(EXAMPLE), "--bootstrap", dep.bootstrap, "--topic", dep.clean_topic,
        "--encoding", encoding, "--app-id", unique_name("faust-consumer"), "--datadir", str(tmp_path / "faust"),
    ]  # fmt: skip
    if registry_url is not None:
        command += ["--registry-url", registry_url]
    if typed:
        cql = tmp_path / "orders.cql"
        cql.write_text(dep.ddl)
        command += ["--schema-cql", str(cql)]
    command += ["worker", "--without-web", "--loglevel", "info"]
    stdout, stderr = tmp_path / "example.out", tmp_path / "example.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CDC__")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    with stdout.open("wb") as out, stderr.open("wb") as err:
        example = subprocess.Popen(
            command,
            cwd=tmp_path,
            env=env,
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    running.append(example)

    def log() -> str:
        return stderr.read_text(errors="replace")[-4000:]

    def printed_all() -> bool:
        assert example.poll() is None, f"the example exited with {example.returncode}:\n{log()}"
        return len(printed_lines(stdout)) >= len(expected)

    wait_until(printed_all, 180, lambda: f"the example to print {len(expected)} lines:\n{log()}", 0.5)
    example.send_signal(signal.SIGTERM)
    try:
        example.wait(60)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the example did not stop within 60 s of SIGTERM:\n{log()}") from None

    printed = printed_lines(stdout)
    assert printed == expected, f"printed:\n{printed}\nexpected:\n{expected}"
    # what the worker made of the writes, independently of the oracle's decoding
    ops = [(line["key"]["id"], line["op"]) for line in printed]
    assert ops == [(1, "c"), (2, "c"), (1, "u"), (3, "c"), (1, "d"), (1, None), (3, "u")]
    assert printed[2]["before"] == {"id": 1, "name": "one", "qty": 1, "paid": False}
    assert printed[2]["after"] == {"id": 1, "name": "one", "qty": 5, "paid": False}
    assert printed[5]["tombstone"] and printed[4]["after"] is None
    assert printed[6]["after"] == {"id": 3, "name": "three", "qty": 3, "paid": True}
    assert printed[6]["source"]["write_time_us"] == 2_001
    # the aborted change lay between the batches: its offset and its abort marker were skipped
    assert printed[4]["offset"] - printed[3]["offset"] > 2
