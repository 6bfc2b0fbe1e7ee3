"""BatchLoop decisions that need no broker: what it leaves alone, and how it waits out a Kafka that is away.

The loop is the worker's own (real stores, schemas, processor and sink), pointed at a port where no Kafka
listens: a refused connection is what "Kafka away" looks like to it. Anything that reached for Kafka
where it must not would fail these tests with a connection error. The decisions that need a broker
(commit, dead letters, fencing, sending early, expiry) are in tests/integration/test_worker_core.py.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import pytest
from aiokafka.errors import KafkaError

from app import batch_loop
from app.batch_loop import BatchLoop, Topics
from app.change_processor import ChangeProcessor
from app.group_offsets import GroupOffsets
from app.partition_producers import PartitionProducers
from app.partition_states import PartitionStates
from app.worker_stats import WorkerStats
from runtime.config import KafkaConfig
from schemas.change_json import JsonChangeCodec
from schemas.schema_topic import TableSchemas
from state.store.partition_store import StoreOptions
from testkit.event_builder import EventBuilder, Write
from tests.integration.agent_harness import free_port
from tests.unit.app import support
from tests.unit.app.support import Record
from tests.unit.state.support import table

SINGLE = table("single")


def raw_record(partition: int, offset: int, key: int) -> Record:
    return support.raw_record(
        partition, offset, SINGLE, EventBuilder(SINGLE).event(Write(key, (), {"v": key}, ts=10, insert=True))
    )


@pytest.fixture
def stats() -> WorkerStats:
    return WorkerStats()


@pytest.fixture
def loop(tmp_path: Path, stats: WorkerStats) -> BatchLoop:
    """A worker's batch loop whose Kafka is away (nothing listens on its bootstrap port)."""
    bootstrap = f"127.0.0.1:{free_port()}"
    kafka = KafkaConfig(bootstrap_servers=bootstrap, request_timeout_ms=2_000)
    return BatchLoop(
        kafka=kafka,
        topics=Topics(
            raw="raw",
            changelog="app.state-changelog",
            dead_letter="app.dead-letter",
            group_id="app",
            clean_partitions=1,
            replication_factor=1,
        ),
        partitions=PartitionStates(
            tmp_path, kafka, "app.state-changelog", StoreOptions(block_cache_bytes=4 << 20), stats
        ),
        schemas=TableSchemas(KafkaConfig(bootstrap_servers=bootstrap, request_timeout_ms=2_000), "schemas"),
        processor=ChangeProcessor(cluster="c", topic_prefix="clean", codec=JsonChangeCodec(), stats=stats),
        producers=PartitionProducers(kafka, "app", transaction_timeout_ms=10_000),
        group_offsets=GroupOffsets(kafka, "app", "raw"),
        stats=stats,
        digest_horizon_s=3600,
    )


@pytest.fixture(autouse=True)
def no_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """A wrong turn towards Kafka fails at once instead of being retried for three minutes."""
    monkeypatch.setattr(batch_loop, "RETRY_FOR_S", 0.0)


def nothing_happened(loop: BatchLoop, stats: WorkerStats, tmp_path: Path) -> None:
    assert loop.partitions.ready == {}, "a store was opened"
    assert not (tmp_path / "state").exists(), "a store directory was created"
    assert stats.document()["total"]["in"] == 0, "events were counted"
    assert stats.registry.get_sample_value("cdc_worker_batch_seconds_count") == 0


def test_a_batch_fetched_before_a_rebalance_is_not_merged(
    loop: BatchLoop, stats: WorkerStats, tmp_path: Path
) -> None:
    loop.partitions.assign({0})
    records = [raw_record(0, 0, 1), raw_record(0, 1, 2)]
    assert asyncio.run(loop.process(records, lambda: False)) == 0
    nothing_happened(loop, stats, tmp_path)


def test_the_batch_is_checked_against_the_rebalance_under_the_lock(
    loop: BatchLoop, stats: WorkerStats, tmp_path: Path
) -> None:
    """A rebalance takes the lock; a batch that was current when handed over but waited for the lock
    while the rebalance ran is dropped."""
    loop.partitions.assign({0})
    state = {"current": True}

    async def main() -> int:
        async with loop.lock:  # the rebalance
            task = asyncio.create_task(loop.process([raw_record(0, 0, 1)], lambda: state["current"]))
            await asyncio.sleep(0.05)
            assert not task.done()
            state["current"] = False
        return await task

    assert asyncio.run(main()) == 0
    nothing_happened(loop, stats, tmp_path)


def test_records_of_partitions_another_worker_owns_are_not_merged(
    loop: BatchLoop, stats: WorkerStats, tmp_path: Path
) -> None:
    loop.partitions.assign({1})
    records = [raw_record(0, 0, 1), raw_record(2, 5, 2)]
    assert asyncio.run(loop.process(records)) == 0
    nothing_happened(loop, stats, tmp_path)


def test_expiry_with_no_partition_assigned_does_nothing(loop: BatchLoop) -> None:
    assert asyncio.run(loop.expire()) == 0


def test_while_kafka_is_away_a_batch_is_retried_with_backoff_then_the_error_goes_up(
    loop: BatchLoop,
    stats: WorkerStats,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Kafka away: retried from scratch, 0.5 s then 1 s apart, each time from the take-over of the
    partition, until RETRY_FOR_S is used up. The take-over registers the partition's transactional id
    first (fencing whoever had it), so no store is opened while that fails, and none is left open. The
    outage is told once when it starts (each attempt only at DEBUG), and the deadline when it is reached."""
    monkeypatch.setattr(batch_loop, "RETRY_FOR_S", 1.0)
    loop.partitions.assign({0})
    caplog.set_level(logging.DEBUG, logger="app")

    started = time.monotonic()
    with pytest.raises(KafkaError):
        asyncio.run(loop.process([raw_record(0, 0, 1)]))
    elapsed = time.monotonic() - started

    retries = [
        r.getMessage()
        for r in caplog.records
        if r.name == "app.batch_loop" and "retrying in" in r.getMessage()
    ]
    assert [m.rsplit("retrying in ", 1)[1] for m in retries] == ["0.5 s", "1.0 s"], retries
    told = [
        (r.levelname, r.getMessage())
        for r in caplog.records
        if r.levelno >= logging.WARNING and r.name.startswith("app")
    ]
    assert [level for level, _ in told] == ["WARNING", "CRITICAL"], told
    assert "does not take the worker's commits" in told[0][1]
    assert "worker.outage_timeout_s is 1" in told[1][1]
    assert 1.5 <= elapsed < 10, elapsed
    assert loop.partitions.ready == {} and loop.producers.registered == set()
    assert stats.document()["total"]["in"] == 0
    assert not loop.partitions.path(0).exists(), "a store was opened before its partition was registered"


def test_only_records_that_continue_where_the_group_resumes_a_partition_are_merged(loop: BatchLoop) -> None:
    """Records below the group's offset were committed already (fetched before the previous owner's last
    transaction finished, or by an attempt whose outcome was unknown): dropped. Records that start above
    it leave a gap: the consumer is moved back once; a gap still there after that (the records were
    deleted by retention) is gone for good, and the partition goes on."""
    moved: list[tuple[int, int]] = []
    takeover = loop.takeover
    takeover.reposition = lambda partition, offset: moved.append((partition, offset))
    takeover.committed(0, 5)
    assert [r.offset for r in takeover.in_line(0, [raw_record(0, o, o) for o in range(3, 8)])] == [5, 6, 7]
    assert takeover.in_line(0, [raw_record(0, o, o) for o in range(3, 5)]) == []
    assert moved == []

    assert takeover.in_line(0, [raw_record(0, o, o) for o in range(8, 10)]) == []
    assert moved == [(0, 5)]
    assert [r.offset for r in takeover.in_line(0, [raw_record(0, 8, 8)])] == [8]
    assert moved == [(0, 5)], "moved back twice to the same offset"

    assert takeover.position(1) is None  # never committed: the consumer started at the earliest offset
    assert [r.offset for r in takeover.in_line(1, [raw_record(1, 40, 1)])] == [40]
