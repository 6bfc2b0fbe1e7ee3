"""The worker's core in-process on the session's real Kafka: BatchLoop and TransactionalSink.

tests/integration/test_worker.py runs whole `cdc worker` processes; here the same parts (real RocksDB
stores restored from a real changelog topic, table schemas read from a real schema topic, the JSON
codec, a real transactional producer) are driven batch by batch, so each decision of the batch loop and
each error path of the sink can be seen on its own. Topics are read back with read_committed isolation,
as consumers must, and every test has topics of its own. No fakes: every error below is one the broker
(or aiokafka) really raises.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import GroupCoordinatorNotAvailableError, MessageSizeTooLargeError, ProducerFenced

from app import batch_loop
from app.batch_loop import BatchLoop, Topics
from app.change_processor import ChangeProcessor
from app.errors import TransactionFailed
from app.group_offsets import GroupOffsets
from app.partition_producers import PartitionProducers, partition_transactional_id
from app.partition_states import PartitionStates, changelog_topic
from app.transactional_sink import Outgoing, TransactionalSink
from app.worker_core import AVAILABLE, change_json, table_merge
from app.worker_stats import WorkerStats
from cassandra_model.ddl_parser import load_schema_from_cql
from cassandra_model.table_schema import TableSchema
from cdc.verify.oracle import read_topic_records
from runtime.config import KafkaConfig
from runtime.kafka_topics import TopicSpec, ensure_topics, topic_partitions
from schemas.change_json import JsonChangeCodec
from schemas.schema_event import schema_event
from schemas.schema_topic import TableSchemas
from state.store.partition_store import StoreOptions
from testkit.event_builder import EventBuilder, Write
from tests.integration.agent_harness import unique_name
from tests.integration.worker_harness import publish_schema_event
from tests.unit.app.support import Record, raw_record, replica_copy

RAW_PARTITIONS = 2
TABLES = ("users", "other", "late")

# ---------------------------------------------------------------------------------------------------------
# a deployment: topics, schemas, and a worker core on them


@dataclass(slots=True)
class Deployment:
    """One worker deployment's topics; the table schemas of ``TABLES`` (published or not)."""

    bootstrap: str
    app_id: str
    keyspace: str
    raw_topic: str
    schema_topic: str
    prefix: str
    schemas: dict[str, TableSchema]
    ddl: dict[str, str]

    @property
    def topics(self) -> Topics:
        return Topics(
            raw=self.raw_topic,
            changelog=changelog_topic(self.app_id),
            dead_letter=f"{self.app_id}.dead-letter",
            group_id=self.app_id,
            clean_partitions=3,
            replication_factor=1,
        )

    def clean_topic(self, table: str = "users") -> str:
        return f"{self.prefix}.{self.keyspace}.{table}"

    def builder(self, table: str = "users") -> EventBuilder:
        return EventBuilder(self.schemas[table])

    async def publish_schema(self, table: str) -> None:
        schema = self.schemas[table]
        event = schema_event(
            "c", self.keyspace, table, str(schema.table_id), cdc=True, dropped=False, cql=self.ddl[table]
        )
        await publish_schema_event(self.bootstrap, self.schema_topic, event)

    async def produce(self, items: Sequence[tuple[int, str, dict[str, Any] | bytes | None]]) -> list[Record]:
        """Write (partition, table, raw event / raw bytes / None) to the raw topic; the records as fetched."""
        producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, acks="all", max_request_size=4 << 20)
        await producer.start()
        out = []
        try:
            for partition, table, item in items:
                if isinstance(item, dict):
                    record = raw_record(partition, 0, self.schemas[table], item)
                else:
                    record = Record(partition, 0, f"{table}-key".encode(), item)
                meta = await producer.send_and_wait(
                    self.raw_topic, record.value, key=record.key, partition=partition
                )
                out.append(Record(partition, meta.offset, record.key, record.value))
        finally:
            await producer.stop()
        return out


async def deploy(bootstrap: str, *, raw_topic_configs: dict[str, str] | None = None) -> Deployment:
    """The topics a worker creates at start-up, and the schema of ``users`` on the schema topic."""
    keyspace = unique_name("core")
    ddl = {
        name: f"CREATE TABLE {keyspace}.{name} (id int PRIMARY KEY, v int, w text) WITH ID = {uuid.uuid4()}"
        for name in TABLES
    }
    schemas = {}
    for name, text in ddl.items():
        schema = load_schema_from_cql(text).by_name(keyspace, name)
        assert schema is not None
        schemas[name] = schema
    dep = Deployment(
        bootstrap,
        unique_name("app"),
        keyspace,
        unique_name("raw"),
        unique_name("schemas"),
        unique_name("clean"),
        schemas,
        ddl,
    )
    topics = dep.topics
    await ensure_topics(
        KafkaConfig(bootstrap_servers=bootstrap),
        [
            TopicSpec(dep.raw_topic, RAW_PARTITIONS, 1, raw_topic_configs or {}),
            TopicSpec(dep.schema_topic, 1, 1, {"cleanup.policy": "compact"}),
            TopicSpec(topics.changelog, RAW_PARTITIONS, 1, {"cleanup.policy": "compact"}),
            TopicSpec(topics.dead_letter, 1, 1),
        ],
    )
    await dep.publish_schema("users")
    await wait_for_group_coordinator(bootstrap, dep.app_id)
    return dep


async def wait_for_group_coordinator(bootstrap: str, group: str, timeout_s: float = 60.0) -> None:
    """A fresh broker creates __consumer_offsets at the first group request and answers
    GroupCoordinatorNotAvailable until then: a test whose first step reads the group's offsets (a
    partition taken over) waits for it, as the worker's own start-up does."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            await group_offsets(bootstrap, group, "any")
            return
        except GroupCoordinatorNotAvailableError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)


@dataclass(slots=True)
class Core:
    """What one worker process runs for its batches (see app/worker.py), minus the raw consumer."""

    loop: BatchLoop
    stats: WorkerStats
    partitions: PartitionStates
    producers: PartitionProducers


@asynccontextmanager
async def worker_core(
    dep: Deployment,
    data: Path,
    *,
    digest_horizon_s: int = 3600,
    bootstrap: str | None = None,
    assigned: set[int] | None = None,
) -> AsyncIterator[Core]:
    """A worker's batch loop owning ``assigned`` raw partitions (default: all), its Kafka clients on
    ``bootstrap`` (default: the deployment's broker)."""
    stats = WorkerStats()
    topics = dep.topics
    kafka = KafkaConfig(bootstrap_servers=bootstrap or dep.bootstrap)
    schemas = TableSchemas(kafka, dep.schema_topic)
    partitions = PartitionStates(
        data, kafka, topics.changelog, StoreOptions(block_cache_bytes=4 << 20), stats
    )
    producers = PartitionProducers(kafka, dep.app_id, transaction_timeout_ms=10_000)
    offsets = GroupOffsets(kafka, dep.app_id, dep.raw_topic)
    await schemas.start()
    try:
        partitions.assign(set(range(RAW_PARTITIONS)) if assigned is None else assigned)
        loop = BatchLoop(
            kafka=kafka,
            topics=topics,
            partitions=partitions,
            schemas=schemas,
            processor=ChangeProcessor(  # on the core the worker runs (app/worker.py)
                cluster="c",
                topic_prefix=dep.prefix,
                codec=JsonChangeCodec(native=change_json(AVAILABLE)),
                stats=stats,
                table_merge=table_merge(AVAILABLE),
            ),
            producers=producers,
            group_offsets=offsets,
            stats=stats,
            digest_horizon_s=digest_horizon_s,
        )
        yield Core(loop, stats, partitions, producers)
    finally:
        with suppress(Exception):
            await producers.stop()
        await offsets.stop()
        await schemas.stop()
        partitions.close()


# ---------------------------------------------------------------------------------------------------------
# reading back


async def committed(bootstrap: str, topic: str) -> list[tuple[int, int, bytes, bytes | None]]:
    """(partition, offset, key, value) of every committed record (read_committed), in offset order."""
    return [(p, o, k, v) for p, o, _, k, v in await read_topic_records(bootstrap, topic, stable_wait_s=30)]


async def changes(bootstrap: str, topic: str) -> list[tuple[int, str, dict[str, Any] | None]]:
    """(id, op, value) of a users-like clean topic's committed records, per key in offset order
    (op "-" for a compaction null)."""
    out = []
    for _, _, key, value in sorted(await committed(bootstrap, topic), key=lambda r: (r[0], r[1])):
        decoded = None if value is None else json.loads(value)
        out.append((json.loads(key)["id"], "-" if decoded is None else decoded["op"], decoded))
    return sorted(out, key=lambda c: c[0])  # stable: each key's history keeps its order


def ops(history: list[tuple[int, str, dict[str, Any] | None]]) -> list[tuple[int, str]]:
    return [(key, op) for key, op, _ in history]


async def group_offsets(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        found = await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()
    return {tp.partition: meta.offset for tp, meta in found.items() if tp.topic == topic and meta.offset >= 0}


async def written(bootstrap: str, topic: str) -> dict[int, int]:
    """Each partition's log end offset, open transactions' records included (read_uncommitted)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tps = await topic_partitions(consumer, topic, timeout_s=5)
        return {tp.partition: end for tp, end in (await consumer.end_offsets(tps)).items()}
    finally:
        await consumer.stop()


async def assert_no_open_transaction(bootstrap: str, topic: str, within_s: float = 3.0) -> None:
    """Every transaction that wrote to ``topic`` has ended (committed or aborted) within ``within_s``: a
    read_committed consumer may read to the end of each partition. A transaction left open would block
    them until the broker's transaction timeout (10 s here) aborts it."""
    deadline = time.monotonic() + within_s
    stable = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed")
    await stable.start()
    try:
        tps = await topic_partitions(stable, topic, timeout_s=5)
        while True:
            ends = await stable.end_offsets(tps)
            logged = await written(bootstrap, topic)
            if all(ends[tp] == logged[tp.partition] for tp in tps):
                return
            assert time.monotonic() < deadline, f"a transaction is still open on {topic}: {ends} < {logged}"
            await asyncio.sleep(0.1)
    finally:
        await stable.stop()


def batch_retries(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The batch loop's "batch not committed ...; retrying in N s" messages (DEBUG: the outage itself is
    told by app/kafka_status.py)."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "app.batch_loop" and "retrying in" in r.getMessage()
    ]


def counter(stats: WorkerStats, name: str, labels: dict[str, str] | None = None) -> float:
    value = stats.registry.get_sample_value(name, labels)
    assert value is not None, name
    return value


def users_stats(stats: WorkerStats, dep: Deployment) -> dict[str, Any]:
    return stats.document()["tables"].get(f"{dep.keyspace}.users", {})


def insert(dep: Deployment, key: int, v: int, ts: int, table: str = "users") -> dict[str, Any]:
    return dep.builder(table).event(Write(key, (), {"v": v}, ts=ts, insert=True))


# ---------------------------------------------------------------------------------------------------------
# the batch loop


def test_one_batch_commits_its_changes_dead_letters_state_and_offsets_together(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    async def main() -> None:
        dep = await deploy(kafka_bootstrap)
        first, second, third = insert(dep, 1, 1, 10), insert(dep, 2, 2, 10), insert(dep, 3, 3, 10)
        update = dep.builder().event(Write(3, (), {"v": 33}, ts=20))
        records = await dep.produce(
            [
                (0, "users", first),
                (0, "users", replica_copy(first, "n2")),
                (0, "users", second),
                (0, "users", None),  # a record without a value
                (1, "users", third),
                (1, "users", b"not a raw event"),
                (1, "users", update),
                (1, "users", third),  # a redelivery
            ]
        )
        async with worker_core(dep, tmp_path) as core:
            assert await core.loop.process(records) == len(records)

            history = await changes(kafka_bootstrap, dep.clean_topic())
            assert ops(history) == [(1, "c"), (2, "c"), (3, "c"), (3, "u")]
            updated = history[3][2]
            assert updated is not None and (updated["before"]["v"], updated["after"]["v"]) == (3, 33)
            dead = await committed(kafka_bootstrap, dep.topics.dead_letter)  # raw partitions commit apart
            assert sorted((k, v or b"") for _, _, k, v in dead) == [
                (records[3].key, b""),
                (records[5].key, b"not a raw event"),
            ]

            last = {p: max(r.offset for r in records if r.partition == p) for p in range(RAW_PARTITIONS)}
            assert await group_offsets(kafka_bootstrap, dep.app_id, dep.raw_topic) == {
                p: offset + 1 for p, offset in last.items()
            }
            changelog = await committed(kafka_bootstrap, dep.topics.changelog)
            for p in range(RAW_PARTITIONS):
                store = core.partitions.store(p)
                assert store.source_offset == last[p] + 1
                ends = [o for part, o, _, _ in changelog if part == p]
                assert ends, f"no changelog record for partition {p}"
                assert store.changelog_offset == max(ends) + 1
                # changelog partition p holds exactly the writes to the store of raw partition p
                state = dict(store.items())
                for _, _, key, value in (r for r in changelog if r[0] == p):
                    assert state.get(key) == value, f"changelog {p} holds {key!r}, store {p} does not"

            table = users_stats(core.stats, dep)
            assert (table["in"], table["duplicates"], table["applied"], table["emitted"]) == (6, 2, 4, 4)
            assert counter(core.stats, "cdc_worker_batch_seconds_count") == 1
            assert counter(core.stats, "cdc_worker_transactions_failed_total") == 0
            assert counter(core.stats, "cdc_worker_last_commit_timestamp_seconds") > time.time() - 60

    asyncio.run(main())


def test_a_new_worker_restores_the_changelog_and_carries_the_histories_on(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """A worker on an empty data folder rebuilds rows and digests from the changelog the first one wrote:
    a copy the first worker merged is still a duplicate, and an update's before image is the row."""

    async def main() -> None:
        dep = await deploy(kafka_bootstrap)
        first = insert(dep, 1, 1, 10)
        records = await dep.produce([(0, "users", first), (1, "users", insert(dep, 2, 2, 10))])
        async with worker_core(dep, tmp_path / "one") as core:
            await core.loop.process(records)
        more = await dep.produce(
            [
                (0, "users", replica_copy(first, "n3")),
                (0, "users", dep.builder().event(Write(1, (), {"v": 7}, ts=30))),
            ]
        )
        async with worker_core(dep, tmp_path / "two") as core:
            await core.loop.restore_assigned()
            restored = counter(core.stats, "cdc_worker_restored_changelog_records_total")
            changelog = await committed(kafka_bootstrap, dep.topics.changelog)
            assert restored == len(changelog) > 0
            await core.loop.process(more)
            assert users_stats(core.stats, dep)["duplicates"] == 1
        history = await changes(kafka_bootstrap, dep.clean_topic())
        assert ops(history) == [(1, "c"), (1, "u"), (2, "c")]
        update = history[1][2]
        assert update is not None and update["before"] == history[0][2]["after"]  # type: ignore[index]
        assert update["after"]["v"] == 7

    asyncio.run(main())


def test_a_fenced_commit_stops_the_batch_at_once_with_nothing_committed(
    kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A fence is fatal: the batch is not retried (a retry would start a new producer and fence the
    successor back), the local state stays as it was, and nothing of the batch ever shows.

    FAKE, on purpose: the broker's ProducerFenced is injected at the commit (``commit_transaction``
    raises it), in both raw partitions' transactions. A real successor fences this worker too (see the
    tests below), but always before the commit is asked for; this reaches the commit's own fence path.
    The real successors start right after, as they would, and abort the transactions left open."""
    monkeypatch.setattr(batch_loop, "RETRY_FOR_S", 1.0)  # a wrong retry fails the test at once

    async def fenced(self: AIOKafkaProducer) -> None:
        raise ProducerFenced()

    async def main() -> None:
        dep = await deploy(kafka_bootstrap)
        records = await dep.produce(
            [(0, "users", insert(dep, 1, 1, 10)), (1, "users", insert(dep, 2, 2, 10))]
        )
        async with worker_core(dep, tmp_path) as core:
            caplog.set_level(logging.DEBUG, logger="app.batch_loop")
            monkeypatch.setattr(AIOKafkaProducer, "commit_transaction", fenced)
            with pytest.raises(TransactionFailed) as failed:
                await core.loop.process(records)
            monkeypatch.undo()
            assert failed.value.fatal, failed.value
            assert not batch_retries(caplog), "a fenced batch was retried"
            assert counter(core.stats, "cdc_worker_transactions_failed_total") == RAW_PARTITIONS
            for p in range(RAW_PARTITIONS):
                store = core.partitions.store(p)
                assert (store.source_offset, store.count_rows()) == (None, 0), "the local state moved on"
                async with started_sink(kafka_bootstrap, partition_transactional_id(dep.app_id, p)):
                    pass  # the successor: registering its id aborts the transaction left open
        assert await changes(kafka_bootstrap, dep.clean_topic()) == []
        assert await committed(kafka_bootstrap, dep.topics.changelog) == []
        assert await group_offsets(kafka_bootstrap, dep.app_id, dep.raw_topic) == {}

    asyncio.run(main())


def test_a_worker_fenced_between_batches_stops_instead_of_fencing_its_successor_back(
    kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The successor of raw partition 0 registers its transactional id while this worker is between
    batches. The next batch sends 4 records early, then waits for a schema; meanwhile the fence comes back
    to the producer (aiokafka's sender meets it first, adding the partition). The batch must stop as
    fenced, and leave the successor alone."""
    monkeypatch.setattr(batch_loop, "SEND_EARLY_RECORDS", 4)

    async def main() -> None:
        dep = await deploy(kafka_bootstrap)
        users = [(0, "users", insert(dep, k, k, 10)) for k in range(6)]
        records = await dep.produce(
            [*users[:4], (0, "late", insert(dep, 99, 1, 10, table="late")), *users[4:]]
        )
        async with worker_core(dep, tmp_path) as core:
            await core.loop.restore_assigned()
            async with started_sink(kafka_bootstrap, partition_transactional_id(dep.app_id, 0)) as successor:
                task = asyncio.create_task(core.loop.process(records))
                await asyncio.sleep(0.5)
                await dep.publish_schema("late")
                with pytest.raises(TransactionFailed) as failed:
                    await task
                assert failed.value.fatal, failed.value
                tx = await successor.begin()  # not fenced back
                await tx.send_all([(dep.topics.dead_letter, b"k", b"successor", 0, ())])
                await tx.commit({}, "unused-group")
        assert await changes(kafka_bootstrap, dep.clean_topic()) == []

    asyncio.run(main())


def test_a_batch_whose_transaction_cannot_begin_is_retried_with_a_new_producer_and_commits_once(
    kafka_bootstrap: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        dep = await deploy(kafka_bootstrap)
        records = await dep.produce(
            [(0, "users", insert(dep, 1, 1, 10)), (1, "users", insert(dep, 2, 2, 10))]
        )
        async with worker_core(dep, tmp_path) as core:
            await core.loop.restore_assigned()
            await core.producers.stop()  # the producers are gone (a registration that failed earlier)
            caplog.set_level(logging.DEBUG, logger="app.batch_loop")
            started = time.monotonic()
            assert await core.loop.process(records) == 2
            assert time.monotonic() - started >= 0.5
            retries = batch_retries(caplog)
            assert len(retries) == 1, [r.getMessage() for r in caplog.records]
            assert core.partitions.store(0).source_offset == records[0].offset + 1
        assert ops(await changes(kafka_bootstrap, dep.clean_topic())) == [(1, "c"), (2, "c")]

    asyncio.run(main())


def test_a_retried_batch_counts_its_events_once(kafka_bootstrap: str, tmp_path: Path) -> None:
    async def main() -> None:
        dep = await deploy(kafka_bootstrap)
        records = await dep.produce(
            [(0, "users", insert(dep, 1, 1, 10)), (1, "users", insert(dep, 2, 2, 10))]
        )
        async with worker_core(dep, tmp_path) as core:
            await core.loop.restore_assigned()
            await core.producers.stop()  # the first attempt fails at begin, the second commits
            assert await core.loop.process(records) == 2
            assert ops(await changes(kafka_bootstrap, dep.clean_topic())) == [(1, "c"), (2, "c")]
            table = users_stats(core.stats, dep)
            assert (table["in"], table["applied"], table["emitted"]) == (2, 2, 2), table
            # both raw partitions' transactions failed at begin once: failed transactions count them too
            assert counter(core.stats, "cdc_worker_transactions_failed_total") == RAW_PARTITIONS

    asyncio.run(main())


def test_a_change_the_clean_topic_refuses_is_retried_until_retry_for_s_then_stops_the_worker(
    kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 1.1 MB row fits the raw topic (configured for it) but not the clean and changelog topics (the
    broker's default max.message.bytes): the broker refuses the record at every attempt. Each attempt is
    aborted and counted; nothing of the batch shows, and the error goes up as a retryable one."""
    monkeypatch.setattr(batch_loop, "RETRY_FOR_S", 0.5)

    async def main() -> None:
        dep = await deploy(kafka_bootstrap, raw_topic_configs={"max.message.bytes": str(4 << 20)})
        big = dep.builder().event(Write(1, (), {"w": "x" * 1_100_000}, ts=10, insert=True))
        records = await dep.produce([(0, "users", insert(dep, 2, 2, 10)), (0, "users", big)])
        async with worker_core(dep, tmp_path) as core:
            with pytest.raises(TransactionFailed) as failed:
                await core.loop.process(records)
            assert not failed.value.fatal
            assert isinstance(failed.value.__cause__, MessageSizeTooLargeError), repr(failed.value.__cause__)
            assert counter(core.stats, "cdc_worker_transactions_failed_total") == 2
            await assert_no_open_transaction(kafka_bootstrap, dep.topics.changelog)
            await core.loop.restore_assigned()  # a failed partition is taken over again before it is used
            store = core.partitions.store(0)
            assert (store.source_offset, store.count_rows()) == (None, 0)
        assert await changes(kafka_bootstrap, dep.clean_topic()) == []
        assert await committed(kafka_bootstrap, dep.topics.changelog) == []
        assert await group_offsets(kafka_bootstrap, dep.app_id, dep.raw_topic) == {}

    asyncio.run(main())


def test_changes_beyond_send_early_records_stream_into_the_open_transaction_and_show_at_its_commit(
    kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With SEND_EARLY_RECORDS 4, ten changes go out as 4 + 4 early and 2 at the commit, all in the one
    transaction; an event of a table whose schema never comes is dead-lettered after SCHEMA_WAIT_S."""
    monkeypatch.setattr(batch_loop, "SEND_EARLY_RECORDS", 4)
    monkeypatch.setattr(batch_loop, "SCHEMA_WAIT_S", 0.5)

    async def main() -> None:
        dep = await deploy(kafka_bootstrap)
        unknown = insert(dep, 99, 1, 10, table="other")
        records = await dep.produce(
            [(0, "users", insert(dep, k, k, 10)) for k in range(10)] + [(0, "other", unknown)]
        )
        async with worker_core(dep, tmp_path) as core:
            assert await core.loop.process(records) == 11
            assert counter(core.stats, "cdc_worker_sent_early_records_total") == 8
            assert counter(core.stats, "cdc_worker_unknown_table_events_total") == 1
        assert ops(await changes(kafka_bootstrap, dep.clean_topic())) == [(k, "c") for k in range(10)]
        dead = await committed(kafka_bootstrap, dep.topics.dead_letter)
        assert [v for _, _, _, v in dead] == [records[10].value]
        assert await group_offsets(kafka_bootstrap, dep.app_id, dep.raw_topic) == {0: records[10].offset + 1}
        assert await committed(kafka_bootstrap, dep.clean_topic("other")) == []

    asyncio.run(main())


def test_a_batch_cancelled_after_sending_early_aborts_what_it_sent(
    kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Records sent early are in the broker's log but in an open transaction; a batch stopped before its
    commit (here: cancelled while it waits for a schema) aborts them, so a read_committed consumer never
    sees them, and merging the batch again emits each change once."""
    monkeypatch.setattr(batch_loop, "SEND_EARLY_RECORDS", 4)

    async def main() -> None:
        dep = await deploy(kafka_bootstrap)
        users = await dep.produce([(0, "users", insert(dep, k, k, 10)) for k in range(10)])
        records = [*users, *await dep.produce([(0, "late", insert(dep, 99, 1, 10, table="late"))])]
        async with worker_core(dep, tmp_path) as core:
            task = asyncio.create_task(core.loop.process(records))
            deadline = time.monotonic() + 10
            while core.stats.registry.get_sample_value("cdc_worker_sent_early_records_total") != 8:
                assert time.monotonic() < deadline and not task.done(), "nothing was sent early"
                await asyncio.sleep(0.02)
            # the early records reach the broker's log while the batch waits for the schema of "late"
            while sum((await written(kafka_bootstrap, dep.clean_topic())).values()) < 8:
                assert time.monotonic() < deadline and not task.done(), "the early records never arrived"
                await asyncio.sleep(0.05)
            assert not task.done()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await assert_no_open_transaction(kafka_bootstrap, dep.clean_topic())
            assert await committed(kafka_bootstrap, dep.clean_topic()) == []
            assert (core.partitions.store(0).source_offset, core.partitions.store(0).count_rows()) == (
                None,
                0,
            )

            assert await core.loop.process(users) == 10
        assert ops(await changes(kafka_bootstrap, dep.clean_topic())) == [(k, "c") for k in range(10)]

    asyncio.run(main())


def test_a_schema_arriving_while_the_batch_waits_for_it_is_used(kafka_bootstrap: str, tmp_path: Path) -> None:
    async def main() -> None:
        dep = await deploy(kafka_bootstrap)
        records = await dep.produce([(1, "late", insert(dep, 5, 50, 10, table="late"))])
        async with worker_core(dep, tmp_path) as core:
            task = asyncio.create_task(core.loop.process(records))
            await asyncio.sleep(0.5)
            assert not task.done(), "an event of an unknown table did not wait for its schema"
            await dep.publish_schema("late")
            assert await asyncio.wait_for(task, batch_loop.SCHEMA_WAIT_S) == 1
            assert counter(core.stats, "cdc_worker_unknown_table_events_total") == 0
        assert ops(await changes(kafka_bootstrap, dep.clean_topic("late"))) == [(5, "c")]
        assert await committed(kafka_bootstrap, dep.topics.dead_letter) == []

    asyncio.run(main())


def test_expiry_emits_due_ttls_in_its_own_transaction_forgets_old_digests_and_skips_idle_ticks(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    async def main() -> None:
        dep = await deploy(kafka_bootstrap)
        async with worker_core(dep, tmp_path, digest_horizon_s=0) as core:
            await core.loop.restore_assigned()
            # written now with a 2 s TTL: it expires at second now_s + 2, a second or more from now
            now_s = int(time.time())
            event = dep.builder().event(
                Write(1, (), {"v": 1}, ts=now_s * 1_000_000, ttl=2, insert=True), now=now_s
            )
            await core.loop.process(await dep.produce([(0, "users", event)]))
            committed_at = counter(core.stats, "cdc_worker_last_commit_timestamp_seconds")
            await asyncio.sleep(max(0.0, now_s + 2.05 - time.time()))

            assert await core.loop.expire() >= 1
            history = await changes(kafka_bootstrap, dep.clean_topic())
            assert ops(history) == [(1, "c"), (1, "d"), (1, "-")]
            source = history[1][2]["source"]  # type: ignore[index]
            assert source["expired"] is True and source["write_time_us"] == (now_s + 2) * 1_000_000
            assert counter(core.stats, "cdc_worker_digests_expired_total") == 1
            expired_at = counter(core.stats, "cdc_worker_last_commit_timestamp_seconds")
            assert expired_at > committed_at, "the expiry did not commit"
            changelog_end = core.partitions.store(0).changelog_offset

            assert await core.loop.expire() == 0
            assert counter(core.stats, "cdc_worker_last_commit_timestamp_seconds") == expired_at, (
                "an idle tick committed a transaction"
            )
            assert core.partitions.store(0).changelog_offset == changelog_end

            # the digest is forgotten: a late copy is merged again (and changes nothing), not dropped
            copy = await dep.produce([(0, "users", replica_copy(event, "n2"))])
            await core.loop.process(copy)
            table = users_stats(core.stats, dep)
            assert table["duplicates"] == 0 and table["in"] == 2, table
        assert len(await changes(kafka_bootstrap, dep.clean_topic())) == 3

    asyncio.run(main())


# ---------------------------------------------------------------------------------------------------------
# the transactional sink


@asynccontextmanager
async def started_sink(
    bootstrap: str, transactional_id: str | None = None
) -> AsyncIterator[TransactionalSink]:
    sink = TransactionalSink(
        KafkaConfig(bootstrap_servers=bootstrap),
        transactional_id or unique_name("tx"),
        transaction_timeout_ms=10_000,
    )
    await sink.start()
    try:
        yield sink
    finally:
        with suppress(Exception):
            await sink.stop()


async def new_topic(bootstrap: str, partitions: int) -> str:
    topic = unique_name("sink")
    await ensure_topics(KafkaConfig(bootstrap_servers=bootstrap), [TopicSpec(topic, partitions)])
    return topic


def test_records_land_where_kafkas_partitioner_puts_them_and_commit_returns_the_next_offsets(
    kafka_bootstrap: str,
) -> None:
    async def main() -> None:
        topic, reference = await new_topic(kafka_bootstrap, 3), await new_topic(kafka_bootstrap, 3)
        keys = [f"key-{i}".encode() for i in range(30)]
        outgoing: list[Outgoing] = [(topic, k, b"v" + k, None, ()) for k in keys]
        outgoing += [(topic, None, b"no key", None, ()), (topic, b"pinned", b"to 2", 2, ())]
        async with started_sink(kafka_bootstrap) as sink:
            tx = await sink.begin()
            await tx.send_all(outgoing)
            assert tx.records == len(outgoing)
            next_offsets = await tx.commit({}, "unused-group")

        plain = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)  # the Java client's partitioner
        await plain.start()
        try:
            expected = {k: (await plain.send_and_wait(reference, b"", key=k)).partition for k in keys}
        finally:
            await plain.stop()
        got = await committed(kafka_bootstrap, topic)
        where = {k: p for p, _, k, _ in got}
        assert {k: where[k] for k in keys} == expected
        assert [p for p, _, k, _ in got if k is None] == [0]
        assert where[b"pinned"] == 2
        assert len({p for p in expected.values()}) == 3, "the keys did not spread: nothing was tested"
        ends: dict[int, int] = {}
        for p, o, _, _ in got:
            ends[p] = max(ends.get(p, 0), o + 1)
        assert next_offsets == {TopicPartition(topic, p): end for p, end in ends.items()}

    asyncio.run(main())


def test_records_beyond_one_record_batch_go_out_in_several_and_keep_their_order(kafka_bootstrap: str) -> None:
    async def main() -> None:
        topic = await new_topic(kafka_bootstrap, 1)
        values = [bytes([i]) * 100_000 for i in range(6)]  # 600 kB: three batches of at most 256 KiB
        async with started_sink(kafka_bootstrap) as sink:
            tx = await sink.begin()
            await tx.send_all((topic, f"k{i}".encode(), v, 0, ()) for i, v in enumerate(values))
            assert len(tx.pending) >= 3 and tx.records == 6
            assert await tx.commit({}, "unused-group") == {TopicPartition(topic, 0): 6}
        assert [v for _, _, _, v in await committed(kafka_bootstrap, topic)] == values

    asyncio.run(main())


def test_an_aborted_transaction_shows_neither_records_nor_offsets_and_the_next_one_commits(
    kafka_bootstrap: str,
) -> None:
    async def main() -> None:
        topic, source = await new_topic(kafka_bootstrap, 1), await new_topic(kafka_bootstrap, 2)
        group = unique_name("group")
        async with started_sink(kafka_bootstrap) as sink:
            tx = await sink.begin()
            await tx.send_all([(topic, b"k", b"aborted", 0, ())])
            await tx.abort()
            assert await committed(kafka_bootstrap, topic) == []
            assert await group_offsets(kafka_bootstrap, group, source) == {}

            tx = await sink.begin()
            await tx.send_all([(topic, b"k", b"committed", 0, ())])
            await tx.commit({TopicPartition(source, 0): 5, TopicPartition(source, 1): 9}, group)
        assert [v for _, _, _, v in await committed(kafka_bootstrap, topic)] == [b"committed"]
        assert await group_offsets(kafka_bootstrap, group, source) == {0: 5, 1: 9}

    asyncio.run(main())


def test_a_sink_fenced_by_a_producer_with_its_transactional_id_fails_fatally(kafka_bootstrap: str) -> None:
    async def main() -> None:
        topic = await new_topic(kafka_bootstrap, 1)
        transactional_id = unique_name("tx")
        async with started_sink(kafka_bootstrap, transactional_id) as old:
            tx = await old.begin()
            await tx.send_all([(topic, b"k", b"old", 0, ())])
            async with started_sink(kafka_bootstrap, transactional_id) as new:
                with pytest.raises(TransactionFailed) as failed:
                    await tx.commit({}, "unused-group")
                assert failed.value.fatal
                assert transactional_id in str(failed.value)
                tx = await new.begin()
                await tx.send_all([(topic, b"k", b"new", 0, ())])
                await tx.commit({}, "unused-group")
        assert [v for _, _, _, v in await committed(kafka_bootstrap, topic)] == [b"new"]

    asyncio.run(main())


def test_a_fence_the_producer_met_before_the_commit_is_fatal_too(kafka_bootstrap: str) -> None:
    """The successor registers before this sink's transaction sends anything (the worker was idle); the
    first send meets the fence in the background, and the commit, with offsets as every batch has,
    must still say fenced."""

    async def main() -> None:
        topic = await new_topic(kafka_bootstrap, 1)
        transactional_id = unique_name("tx")
        async with started_sink(kafka_bootstrap, transactional_id) as old:
            tx = await old.begin()
            async with started_sink(kafka_bootstrap, transactional_id):
                await tx.send_all([(topic, b"k", b"old", 0, ())])
                await asyncio.sleep(0.5)  # the AddPartitionsToTxn answer (fenced) is back
                with pytest.raises(TransactionFailed) as failed:
                    await tx.commit({TopicPartition(topic, 0): 1}, unique_name("group"))
                assert failed.value.fatal, repr(failed.value.__cause__)

    asyncio.run(main())


def test_a_record_the_broker_refuses_fails_the_commit_retryably_and_a_restarted_sink_goes_on(
    kafka_bootstrap: str,
) -> None:
    """MessageSizeTooLarge (1.2 MB against the broker's 1 MB max.message.bytes): the transaction is
    aborted (the small record of the same transaction never shows) and the error is not fatal; after
    ``restart`` (what the batch loop does before it retries) the sink commits again."""

    async def main() -> None:
        topic = await new_topic(kafka_bootstrap, 2)
        async with started_sink(kafka_bootstrap) as sink:
            tx = await sink.begin()
            await tx.send_all([(topic, b"small", b"s", 1, ()), (topic, b"big", b"x" * 1_200_000, 0, ())])
            with pytest.raises(TransactionFailed) as failed:
                await tx.commit({}, "unused-group")
            assert not failed.value.fatal
            assert isinstance(failed.value.__cause__, MessageSizeTooLargeError)
            assert "2 records" in str(failed.value)
            await assert_no_open_transaction(kafka_bootstrap, topic)
            await sink.restart()  # this producer's sequence numbers are broken: it cannot go on
            tx = await sink.begin()
            await tx.send_all([(topic, b"after", b"a", 1, ())])
            await tx.commit({}, "unused-group")
        assert [(k, v) for _, _, k, v in await committed(kafka_bootstrap, topic)] == [(b"after", b"a")]

    asyncio.run(main())


def test_a_send_to_a_partition_the_topic_lacks_fails_retryably_and_aborts(kafka_bootstrap: str) -> None:
    """The failed send aborts the transaction: what it sent before never shows, and the same producer
    begins the next transaction."""

    async def main() -> None:
        topic = await new_topic(kafka_bootstrap, 1)
        async with started_sink(kafka_bootstrap) as sink:
            tx = await sink.begin()
            await tx.send_all([(topic, b"k", b"first", 0, ())])
            with pytest.raises(TransactionFailed) as failed:
                await tx.send_all([(topic, b"k", b"nowhere", 5, ())])
            assert not failed.value.fatal
            assert "a send failed inside transaction" in str(failed.value)
            await assert_no_open_transaction(kafka_bootstrap, topic)
            tx = await sink.begin()
            await tx.send_all([(topic, b"k", b"again", 0, ())])
            await tx.commit({}, "unused-group")
        assert [v for _, _, _, v in await committed(kafka_bootstrap, topic)] == [b"again"]

    asyncio.run(main())


def test_a_transaction_sends_its_offsets_once_its_records_are_in_so_the_broker_never_turns_them_back(
    kafka_bootstrap: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A broker of Kafka 3.6+ checks with the transaction coordinator that a transactional record's
    partition is in the transaction (KIP-890). While the coordinator adds the consumed offsets to the same
    transaction it answers that check with CONCURRENT_TRANSACTIONS, which reaches the producer as
    NOT_ENOUGH_REPLICAS: the records are sent again (21 to 668 such warnings per worker run, on a single
    broker where no replica is missing). Twelve sinks commit as a batch's partitions do (state records,
    change events, offsets); none of their records is turned back."""

    async def commit_batches(changelog: str, clean: str, source: str, group: str, p: int) -> None:
        async with started_sink(kafka_bootstrap) as sink:
            for batch in range(BATCHES):
                tx = await sink.begin()
                records: list[Outgoing] = [
                    (changelog, f"s{batch}-{i}".encode(), b"s", p, ()) for i in range(20)
                ]
                records += [(clean, f"c{batch}-{i}".encode(), b"c", None, ()) for i in range(20)]
                await tx.send_all(records)
                await tx.commit({TopicPartition(source, p): batch + 1}, group)

    async def main() -> None:
        changelog, clean = await new_topic(kafka_bootstrap, 12), await new_topic(kafka_bootstrap, 12)
        source, group = await new_topic(kafka_bootstrap, 12), unique_name("group")
        await asyncio.gather(*(commit_batches(changelog, clean, source, group, p) for p in range(12)))
        assert await group_offsets(kafka_bootstrap, group, source) == dict.fromkeys(range(12), BATCHES)

    BATCHES = 15
    caplog.set_level(logging.WARNING, logger="aiokafka")
    asyncio.run(main())
    turned_back = [r.getMessage() for r in caplog.records if "NotEnoughReplicas" in r.getMessage()]
    assert turned_back == [], f"{len(turned_back)} sends turned back, e.g. {turned_back[0]}"
