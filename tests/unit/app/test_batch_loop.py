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
from app.partition_states import PartitionStates
from app.transactional_sink import TransactionalSink
from app.worker_stats import WorkerStats
from runtime.config import KafkaConfig
from schemas.change_json import JsonChangeCodec
from schemas.schema_topic import TableSchemas
from state.store.partition_store import PartitionStore, StoreOptions
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
        sink=TransactionalSink(kafka, "app-w1", transaction_timeout_ms=10_000),
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
    """Kafka away (restore, begin, commit): retried from scratch, 0.5 s then 1 s apart, each time with
    an attempt at a new producer, until RETRY_FOR_S is used up; no store is left open (locked)."""
    monkeypatch.setattr(batch_loop, "RETRY_FOR_S", 1.0)
    loop.partitions.assign({0})
    caplog.set_level(logging.WARNING, logger="app.batch_loop")

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
    restarts = [r for r in caplog.records if "cannot restart the transactional producer" in r.getMessage()]
    assert len(restarts) == 2
    assert 1.5 <= elapsed < 10, elapsed
    assert loop.partitions.ready == {}
    assert stats.document()["total"]["in"] == 0
    assert loop.partitions.path(0).exists(), "the retries never reached the restore"
    # the stores opened for the restore were closed again: the directory opens (RocksDB's lock is free)
    PartitionStore(loop.partitions.path(0), 0, StoreOptions(block_cache_bytes=1 << 20)).close()
