"""Exactly once under the faults that used to break it: the worker core on the session's real Kafka.

Each test is one way a change could be emitted twice, stored without its event, or stop every worker:
a commit whose answer never comes, a worker that lost its partition and still commits, a column that
reaches the worker before its schema, a raw event the merge cannot take. The core is the one of
tests/integration/test_worker_core.py (real stores, real changelog, real transactional producers);
clean topics are read back read_committed, as consumers must.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from app import batch_loop, change_processor
from app.errors import TransactionFailed
from cassandra_model.ddl_parser import load_schema_from_cql
from cassandra_model.schema_cql import table_to_cql
from cassandra_model.table_schema import TableSchema
from cdc.verify.oracle import read_topic_records
from runtime.kafka_proxy import END_TXN, KafkaProxy
from runtime.kafka_topics import topic_partitions
from schemas.schema_event import schema_event
from state.errors import StateError
from state.store import merge
from testkit.event_builder import DeleteRange, EventBuilder, Write
from tests.integration.agent_harness import wait_until
from tests.integration.test_worker_core import (
    Core,
    Deployment,
    changes,
    committed,
    counter,
    deploy,
    group_offsets,
    insert,
    ops,
    users_stats,
    worker_core,
)
from tests.integration.test_worker_liveness import deploy as deploy_processes
from tests.integration.worker_harness import group_lag


async def dead_letters(bootstrap: str, topic: str) -> list[tuple[bytes | None, bytes | None, dict[str, str]]]:
    """(key, value, headers) of every committed dead letter, in offset order."""
    await committed(bootstrap, topic)  # every transaction that wrote to it has ended
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False
    )
    await consumer.start()
    try:
        tps = await topic_partitions(consumer, topic, timeout_s=5)
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        out = []
        while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
            for records in (await consumer.getmany(timeout_ms=1000)).values():
                out.extend((r.key, r.value, {k: v.decode() for k, v in r.headers}) for r in records)
        return out
    finally:
        await consumer.stop()


def assert_store_is_its_changelog(core: Core, changelog: list[tuple[int, int, bytes, bytes | None]]) -> None:
    """Each store holds what its changelog partition says (the last record of each key), and has applied
    all of it."""
    for p in core.partitions.assigned:
        store = core.partitions.store(p)
        state = dict(store.items())
        mine = sorted((o, k, v) for part, o, k, v in changelog if part == p)
        for key, value in {k: v for _, k, v in mine}.items():
            assert state.get(key) == value, f"changelog {p} holds {key!r}, store {p} does not"
        assert store.changelog_offset >= max((o + 1 for o, _, _ in mine), default=0)


# ---------------------------------------------------------------------------------------------------------
# a commit whose outcome is unknown


@pytest.mark.parametrize("answered", [True, False], ids=["committed", "never-reached"])
def test_a_commit_whose_answer_never_comes_is_settled_and_each_change_is_emitted_once(
    kafka_bootstrap: str, tmp_path: Path, answered: bool
) -> None:
    """The worker's Kafka connections run through a proxy of ours (runtime/kafka_proxy.py). At the first
    EndTxn (the commit of a raw partition's transaction) it cuts every connection, with the commit carried
    out by the broker (``committed``: forwarded, the answer withheld) or not (``never-reached``: dropped),
    and refuses new connections for 12 s: longer than the producer's step timeout (10 s), so the worker
    gives up waiting without knowing the outcome. Either way each change shows once, the stores hold what
    their changelogs hold, and the group's offsets are past every record."""

    async def main() -> None:
        dep = await deploy(kafka_bootstrap)
        update = dep.builder().event(Write(1, (), {"v": 11}, ts=20))
        records = await dep.produce(
            [(0, "users", insert(dep, 1, 1, 10)), (0, "users", update), (1, "users", insert(dep, 2, 2, 10))]
        )
        async with (
            KafkaProxy(kafka_bootstrap) as proxy,
            worker_core(dep, tmp_path, bootstrap=proxy.bootstrap) as core,
        ):
            await core.loop.restore_assigned()
            cut = (proxy.cut_after if answered else proxy.cut_before)(END_TXN, refuse_s=12.0)
            assert await core.loop.process(records) == 3
            assert cut.is_set(), "the fault never happened: nothing was tested"

            assert ops(await changes(kafka_bootstrap, dep.clean_topic())) == [(1, "c"), (1, "u"), (2, "c")]
            assert await group_offsets(kafka_bootstrap, dep.app_id, dep.raw_topic) == {
                0: records[1].offset + 1,
                1: records[2].offset + 1,
            }
            assert_store_is_its_changelog(core, await committed(kafka_bootstrap, dep.topics.changelog))
            assert counter(core.stats, "cdc_worker_transactions_failed_total") >= 1
            table = users_stats(core.stats, dep)
            assert (table["in"], table["applied"], table["emitted"]) == (3, 3, 3), table

    asyncio.run(main())


# ---------------------------------------------------------------------------------------------------------
# a worker that lost its partition


def test_a_worker_that_lost_its_partition_cannot_commit_on_it_and_nothing_is_emitted_twice(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """A worker merges a batch of raw partition 0 and stalls before its commit (here: waiting for a schema;
    in production: a pause past its session timeout). Meanwhile the group gives partition 0 to another
    worker, which takes it over and merges the same records. When the first one goes on, its commit must
    fail as fenced, and each change shows once."""

    async def main() -> None:
        dep = await deploy(kafka_bootstrap)
        users = [(0, "users", insert(dep, k, k, 10)) for k in range(4)]
        records = await dep.produce(
            [*users, (0, "late", insert(dep, 99, 1, 10, table="late")), (0, "users", insert(dep, 4, 4, 10))]
        )
        async with worker_core(dep, tmp_path / "first") as first:
            await first.loop.restore_assigned()
            stalled = asyncio.create_task(first.loop.process(records))
            await asyncio.sleep(0.5)
            assert not stalled.done(), "the first worker did not stall in its batch"

            async with worker_core(dep, tmp_path / "next", assigned={0}) as successor:
                assert await successor.loop.process(records[:4]) == 4
                await dep.publish_schema("late")
                with pytest.raises(TransactionFailed) as failed:
                    await stalled
                assert failed.value.fatal, failed.value
                assert f"{dep.app_id}-0" in str(failed.value)
                assert await successor.loop.process(records[4:]) == 2

        assert ops(await changes(kafka_bootstrap, dep.clean_topic())) == [(k, "c") for k in range(5)]
        assert ops(await changes(kafka_bootstrap, dep.clean_topic("late"))) == [(99, "c")]
        assert await group_offsets(kafka_bootstrap, dep.app_id, dep.raw_topic) == {0: records[-1].offset + 1}

    asyncio.run(main())


def test_a_worker_paused_past_its_session_timeout_cannot_commit_when_it_resumes(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """The same with `cdc worker` processes and a real pause. The first worker fetches raw events of which
    one belongs to a table whose schema is not published yet: it waits for it inside its batch. It is
    then stopped with SIGSTOP past its session timeout (6 s): the second worker takes its partitions over
    and, once the schema is there, merges the same events. Resumed with SIGCONT, the first worker goes
    on with its batch, and its commit fails as fenced: it stops, and every change shows once."""
    dep = deploy_processes(kafka_bootstrap, tmp_path)
    first = dep.worker("w1", session_timeout_ms=6000)
    second = dep.worker("w2", session_timeout_ms=6000)
    try:
        first.start()
        first.wait_healthy(90)
        wait_until(lambda: (first.health() or {}).get("partitions_ready") == [0, 1], 60, "w1 to own both")
        written = time.time_ns() // 1000
        dep.produce(0, dep.users, [1, 2], written)
        dep.produce(0, dep.unknown, [3], written)
        dep.produce(0, dep.users, [4], written)
        time.sleep(2.0)  # fetched: w1 waits for the schema of `unknown` in its batch
        assert first.running, first.log_tail()
        assert first.process is not None
        os.kill(first.process.pid, signal.SIGSTOP)
        try:
            second.start()
            second.wait_healthy(90)
            wait_until(
                lambda: (second.health() or {}).get("partitions_ready") == [0, 1],
                90,
                lambda: f"w2 to take both partitions over:\n{second.log_tail()}",
            )
            publish(dep.bootstrap, dep.schema_topic, dep.unknown)
            wait_until(
                lambda: group_lag(kafka_bootstrap, dep.app_id, dep.raw_topic) == 0,
                60,
                lambda: f"w2 to merge everything:\n{second.log_tail()}",
            )
        finally:
            os.kill(first.process.pid, signal.SIGCONT)
        users_topic = f"{dep.prefix}.{dep.users.keyspace}.users"
        wait_until(  # w1 stops, or its batch shows a second time
            lambda: not first.running or len(clean_keys(dep.bootstrap, users_topic)) > 3,
            60,
            lambda: f"w1 to stop or commit:\n{first.log_tail()}",
        )
        users = clean_keys(dep.bootstrap, users_topic)
        unknown = clean_keys(dep.bootstrap, f"{dep.prefix}.{dep.unknown.keyspace}.unknown")
        assert (users, unknown) == ([1, 2, 4], [3]), "a change shows twice, or not at all"
        first.process.wait(10)
        assert first.process.returncode != 0
        assert "was registered by another producer" in first.log_text(), first.log_tail()
        assert second.running and second.health() is not None
    finally:
        first.ensure_stopped()
        second.ensure_stopped()


def publish(bootstrap: str, topic: str, table: TableSchema) -> None:
    """The table's schema on the schema topic, as an agent publishes it."""
    event = schema_event(
        "c",
        table.keyspace,
        table.table,
        str(table.table_id),
        cdc=True,
        dropped=False,
        cql=table_to_cql(table),
    )

    async def send() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
        await producer.start()
        try:
            await producer.send_and_wait(topic, event.encode(), key=event.key)
        finally:
            await producer.stop()

    asyncio.run(send())


def clean_keys(bootstrap: str, topic: str) -> list[int]:
    """The ids of the committed change events of a clean topic, one per event, sorted."""
    records = asyncio.run(read_topic_records(bootstrap, topic))
    return sorted(json.loads(key)["id"] for _, _, _, key, value in records if value is not None)


# ---------------------------------------------------------------------------------------------------------
# a column that reaches the worker before its schema


def add_column(dep: Deployment, table: str, column: str, cql_type: str) -> EventBuilder:
    """ALTER TABLE ... ADD, as the deployment's schema (not published yet); a builder of its events."""
    dep.ddl[table] = dep.ddl[table].replace(" PRIMARY KEY, ", f" PRIMARY KEY, {column} {cql_type}, ")
    schema = load_schema_from_cql(dep.ddl[table]).by_name(dep.keyspace, table)
    assert schema is not None and column in schema.regular_columns, dep.ddl[table]
    dep.schemas[table] = schema
    return EventBuilder(schema)


def test_a_cell_of_a_column_the_worker_does_not_know_yet_waits_for_the_newer_schema(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """``ALTER TABLE users ADD x int``, then a write of x: the raw event comes before the schema does.
    The worker must wait for the schema that has x and emit the row with it."""

    async def main() -> None:
        dep = await deploy(kafka_bootstrap)
        first = await dep.produce([(0, "users", insert(dep, 1, 1, 10))])
        altered = add_column(dep, "users", "x", "int")
        write = altered.event(Write(2, (), {"v": 2, "x": 5}, ts=20, insert=True))
        records = await dep.produce([(0, "users", write)])
        async with worker_core(dep, tmp_path) as core:
            assert await core.loop.process(first) == 1
            task = asyncio.create_task(core.loop.process(records))
            await asyncio.sleep(1.0)
            assert not task.done(), "an event with an unknown column did not wait for its schema"
            await dep.publish_schema("users")
            assert await asyncio.wait_for(task, batch_loop.SCHEMA_WAIT_S) == 1
        history = await changes(kafka_bootstrap, dep.clean_topic())
        assert ops(history) == [(1, "c"), (2, "c")]
        after = history[1][2]
        assert after is not None and after["after"]["x"] == 5, after
        assert await committed(kafka_bootstrap, dep.topics.dead_letter) == []

    asyncio.run(main())


def test_a_column_the_worker_does_not_know_waits_even_among_events_merged_from_their_bytes(
    kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One batch: inserts of users (the native merge takes the first decoded, the next ones straight
    from their bytes), then a write of a column added since, then one more insert. The write must
    wait for the schema that has its column, not be merged with the old one (its cell stored but never
    shown), and the insert after it be merged with the newer schema."""
    taken: list[str] = []
    merge_raw = change_processor.ChangeProcessor.merge_raw

    def counting(self: change_processor.ChangeProcessor, *args: Any, **kwargs: Any) -> str | None:
        outcome = merge_raw(self, *args, **kwargs)
        if outcome is not None:
            taken.append(outcome)
        return outcome

    monkeypatch.setattr(change_processor.ChangeProcessor, "merge_raw", counting)

    async def main() -> None:
        dep = await deploy(kafka_bootstrap)
        before = [(0, "users", insert(dep, i, i, 10)) for i in (1, 2, 3)]
        altered = add_column(dep, "users", "x", "int")
        write = altered.event(Write(4, (), {"v": 4, "x": 5}, ts=20, insert=True))
        records = await dep.produce([*before, (0, "users", write), (0, "users", insert(dep, 5, 5, 10))])
        async with worker_core(dep, tmp_path) as core:
            task = asyncio.create_task(core.loop.process(records))
            await asyncio.sleep(1.0)
            assert not task.done(), "an event with an unknown column did not wait for its schema"
            await dep.publish_schema("users")
            assert await asyncio.wait_for(task, batch_loop.SCHEMA_WAIT_S) == 5
            assert users_stats(core.stats, dep)["merged_natively"] == 5
        history = await changes(kafka_bootstrap, dep.clean_topic())
        assert ops(history) == [(i, "c") for i in (1, 2, 3, 4, 5)]
        assert history[3][2]["after"]["x"] == 5 and history[4][2]["after"]["x"] is None, history
        assert await committed(kafka_bootstrap, dep.topics.dead_letter) == []

    asyncio.run(main())
    assert taken == ["applied"] * 3  # events 2, 3 (the first schema) and 5 (the newer one)


def test_a_cell_whose_column_never_arrives_is_dead_lettered_after_the_wait(
    kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(batch_loop, "SCHEMA_WAIT_S", 0.5)

    async def main() -> None:
        dep = await deploy(kafka_bootstrap)
        altered = add_column(dep, "users", "x", "int")
        records = await dep.produce(
            [
                (0, "users", altered.event(Write(2, (), {"x": 5}, ts=20, insert=True))),
                (0, "users", insert(dep, 3, 3, 10)),
            ]
        )
        async with worker_core(dep, tmp_path) as core:
            assert await core.loop.process(records) == 2
            assert counter(core.stats, "cdc_worker_dead_letters_total", {"reason": "unknown_column"}) == 1
            assert core.stats.document()["dead_letters"]["unknown_column"] == 1
        assert ops(await changes(kafka_bootstrap, dep.clean_topic())) == [(3, "c")]
        [(key, value, headers)] = await dead_letters(kafka_bootstrap, dep.topics.dead_letter)
        assert (key, value) == (records[0].key, records[0].value)
        assert headers["cdc.reason.kind"] == "unknown_column"
        assert "column(s) x" in headers["cdc.reason"] and f"{dep.keyspace}.users" in headers["cdc.reason"]
        assert (headers["cdc.raw.partition"], headers["cdc.raw.offset"]) == ("0", str(records[0].offset))

    asyncio.run(main())


# ---------------------------------------------------------------------------------------------------------
# a raw event the merge cannot take


def test_raw_events_the_merge_cannot_take_are_dead_lettered_and_the_worker_goes_on(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Three events that used to stop every worker the partition moved to: a value that does not decode
    as its type (found while its change is built, after the merge wrote the row: that write is undone), a
    clustering value for a table without clustering columns (ClusteringValueError) and a range deletion
    left open (StateError). Each goes to the dead-letter topic with its raw bytes, the reason and where it
    was read; the good events around them are merged, and the key of the bad value stays as before."""

    async def main() -> None:
        dep = await deploy(kafka_bootstrap)
        bad_value = insert(dep, 2, 2, 20)
        bad_value["rows"][0]["cells"][0]["value"] = b"\x00\x01\x02"  # an int of 3 bytes
        bad_clustering = insert(dep, 5, 5, 20)
        bad_clustering["rows"][0]["clustering"] = [b"\x00\x00\x00\x01"]
        open_range = insert(dep, 6, 6, 20)
        open_range["range_tombstones"] = [
            {
                "kind": 1,
                "clustering": [],
                "deletion": {"timestamp": 5, "local_deletion_time": 1},
                "start_deletion": None,
            }
        ]
        records = await dep.produce(
            [
                (0, "users", insert(dep, 2, 1, 10)),
                (0, "users", bad_value),
                (0, "users", insert(dep, 3, 3, 10)),
                (1, "users", bad_clustering),
                (1, "users", open_range),
                (1, "users", insert(dep, 4, 4, 10)),
            ]
        )
        async with worker_core(dep, tmp_path) as core:
            assert await core.loop.process(records) == 6
            assert counter(core.stats, "cdc_worker_dead_letters_total", {"reason": "merge_error"}) == 3
            table = users_stats(core.stats, dep)
            assert (table["in"], table["applied"], table["emitted"]) == (3, 3, 3), table
            later = await dep.produce([(0, "users", dep.builder().event(Write(2, (), {"v": 7}, ts=30)))])
            assert await core.loop.process(later) == 1
            assert_store_is_its_changelog(core, await committed(kafka_bootstrap, dep.topics.changelog))

        history = await changes(kafka_bootstrap, dep.clean_topic())
        assert ops(history) == [(2, "c"), (2, "u"), (3, "c"), (4, "c")]
        update = history[1][2]
        assert update is not None and (update["before"]["v"], update["after"]["v"]) == (1, 7), update
        dead = await dead_letters(kafka_bootstrap, dep.topics.dead_letter)
        by_offset = {(h["cdc.raw.partition"], int(h["cdc.raw.offset"])): (k, v, h) for k, v, h in dead}
        expected = {
            (records[1].partition, records[1].offset): "int",
            (records[3].partition, records[3].offset): "ClusteringValueError",
            (records[4].partition, records[4].offset): "StateError",
        }
        assert set(by_offset) == {(str(p), o) for p, o in expected}
        for (partition, offset), cause in expected.items():
            record = next(r for r in records if (r.partition, r.offset) == (partition, offset))
            key, value, headers = by_offset[(str(partition), offset)]
            assert (key, value) == (record.key, record.value)
            assert headers["cdc.reason.kind"] == "merge_error" and headers["cdc.raw.topic"] == dep.raw_topic
            assert cause in headers["cdc.reason"] and f"@{offset}" in headers["cdc.reason"], headers

    asyncio.run(main())


def test_an_event_failing_after_some_of_its_changes_were_sent_early_is_dead_lettered_whole(
    kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A range deletion over three stored rows that also writes a row whose value does not decode: its
    changes come in chunks of one row (CHUNK_ROWS 1), each sent into the transaction at once
    (SEND_EARLY_RECORDS 1), so the three deletions are sent before the bad row fails. They cannot be taken
    back: the partition's share is merged again with that event dead-lettered at once. No change of it is
    committed, the rows stay, and the event after it is merged once."""
    monkeypatch.setattr(batch_loop, "SEND_EARLY_RECORDS", 1)
    monkeypatch.setattr(merge, "CHUNK_ROWS", 1)

    async def main() -> None:
        dep = await deploy(kafka_bootstrap)
        ddl = (
            f"CREATE TABLE {dep.keyspace}.wide (id int, c int, v int, PRIMARY KEY (id, c)) "
            f"WITH ID = {uuid.uuid4()}"
        )
        schema = load_schema_from_cql(ddl).by_name(dep.keyspace, "wide")
        assert schema is not None
        dep.ddl["wide"], dep.schemas["wide"] = ddl, schema
        await dep.publish_schema("wide")
        wide = dep.builder("wide")
        rows = await dep.produce(
            [(0, "wide", wide.event(Write(1, (c,), {"v": c}, ts=10, insert=True))) for c in (1, 2, 3)]
        )
        bad = wide.event(DeleteRange(1, low=1, high=3, ts=20))
        bad_row = wide.event(Write(1, (9,), {"v": 9}, ts=20, insert=True))["rows"][0]
        bad_row["cells"][0]["value"] = b"\x00\x01\x02"  # an int of 3 bytes
        bad["rows"].append(bad_row)
        records = await dep.produce(
            [(0, "wide", bad), (0, "wide", wide.event(Write(3, (1,), {"v": 6}, ts=10, insert=True)))]
        )
        caplog.set_level(logging.WARNING, logger="app.batch_loop")
        async with worker_core(dep, tmp_path) as core:
            await core.loop.restore_assigned()
            assert await core.loop.process(rows) == 3
            assert await core.loop.process(records) == 2
            assert counter(core.stats, "cdc_worker_dead_letters_total", {"reason": "merge_error"}) == 1
            assert_store_is_its_changelog(core, await committed(kafka_bootstrap, dep.topics.changelog))
        again = [r.getMessage() for r in caplog.records if "again" in r.getMessage()]
        assert len(again) == 1 and f"@{records[0].offset}" in again[0], again

        history = await changes(kafka_bootstrap, dep.clean_topic("wide"))
        assert ops(history) == [(1, "c"), (1, "c"), (1, "c"), (3, "c")], history
        [(key, value, headers)] = await dead_letters(kafka_bootstrap, dep.topics.dead_letter)
        assert (key, value) == (records[0].key, records[0].value)
        assert headers["cdc.reason.kind"] == "merge_error" and "int" in headers["cdc.reason"], headers

    asyncio.run(main())


# ---------------------------------------------------------------------------------------------------------
# a stored partition whose expiry cannot be computed


def test_a_stored_partition_whose_expiry_fails_is_set_aside_and_the_others_expire(
    kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Two rows expire in the same second; computing the expiry of one fails (the state raises a
    StateError for it, as a stored value that no longer decodes would). With every change sent at once
    (SEND_EARLY_RECORDS 1) the pass may have sent the other's expiry already: it is run again with the bad
    partition set aside. Its due entries go, a dead letter names its table and key, the other row's expiry
    is emitted once, and the next pass does not stop on it again."""
    monkeypatch.setattr(batch_loop, "SEND_EARLY_RECORDS", 1)
    real_expire_partition = change_processor.expire_partition
    bad_keys: set[bytes] = set()

    def expire_partition(txn, schema, partition_key, due, now_s):  # type: ignore[no-untyped-def]
        if partition_key in bad_keys:
            raise StateError("a stored cell does not decode")
        return real_expire_partition(txn, schema, partition_key, due, now_s)

    monkeypatch.setattr(change_processor, "expire_partition", expire_partition)

    async def main() -> None:
        dep = await deploy(kafka_bootstrap)
        builder = dep.builder()
        bad_keys.add(builder.partition_key(1))
        async with worker_core(dep, tmp_path) as core:
            await core.loop.restore_assigned()
            now_s = int(time.time())
            events = [
                builder.event(Write(k, (), {"v": k}, ts=now_s * 1_000_000, ttl=2, insert=True), now=now_s)
                for k in (1, 2)
            ]
            await core.loop.process(await dep.produce([(0, "users", e) for e in events]))
            await asyncio.sleep(max(0.0, now_s + 2.05 - time.time()))
            caplog.set_level(logging.WARNING, logger="app.batch_loop")

            assert await core.loop.expire() >= 1
            assert counter(core.stats, "cdc_worker_dead_letters_total", {"reason": "expiry_error"}) == 1
            assert await core.loop.expire() == 0
            assert counter(core.stats, "cdc_worker_dead_letters_total", {"reason": "expiry_error"}) == 1
            assert_store_is_its_changelog(core, await committed(kafka_bootstrap, dep.topics.changelog))
        again = [r.getMessage() for r in caplog.records if "again" in r.getMessage()]
        assert len(again) == 1 and "users partition 00000001" in again[0], again

        assert ops(await changes(kafka_bootstrap, dep.clean_topic())) == [
            (1, "c"),
            (2, "c"),
            (2, "d"),
            (2, "-"),
        ]
        [(key, value, headers)] = await dead_letters(kafka_bootstrap, dep.topics.dead_letter)
        assert key == builder.partition_key(1) and value is not None
        report = json.loads(value)
        assert (report["keyspace"], report["table"], report["partition_key"]) == (
            dep.keyspace,
            "users",
            "00000001",
        )
        assert report["due_entries"] >= 1 and report["first_due_s"] == now_s + 2, report
        assert headers["cdc.reason.kind"] == "expiry_error" and "StateError" in headers["cdc.reason"], headers

    asyncio.run(main())
