"""Standby copies on the session's real Kafka, in process: a copy applies only committed changelog records,
hands its directory over to the takeover (which then restores only what the copy had not applied), and
takes it back when the partition is revoked."""

from __future__ import annotations

import asyncio
from pathlib import Path

from aiokafka import AIOKafkaProducer

from app.partition_states import PartitionStates
from app.standby_stores import StandbyStores
from app.worker_stats import WorkerStats
from runtime.config import KafkaConfig
from runtime.kafka_topics import TopicSpec, ensure_topics
from state.store.keys import META
from state.store.partition_store import StoreOptions
from tests.integration.agent_harness import unique_name


async def transaction(producer: AIOKafkaProducer, topic: str, records: list[tuple[bytes, bytes | None]],
                      *, commit: bool = True) -> None:  # fmt: skip
    async with producer.transaction() if commit else _aborted(producer):
        for key, value in records:
            await producer.send(topic, value, key=key, partition=0)


class _aborted:
    def __init__(self, producer: AIOKafkaProducer) -> None:
        self.producer = producer

    async def __aenter__(self) -> None:
        await self.producer.begin_transaction()

    async def __aexit__(self, *exc: object) -> None:
        await self.producer.abort_transaction()


def applied(stats: WorkerStats) -> float:
    return stats.registry.get_sample_value("cdc_worker_standby_applied_changelog_records_total") or 0.0


def restored_records(stats: WorkerStats) -> float:
    return stats.registry.get_sample_value("cdc_worker_restored_changelog_records_total") or 0.0


async def until(condition: object, timeout_s: float, what: str) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():  # type: ignore[operator]
        assert asyncio.get_running_loop().time() < deadline, what
        await asyncio.sleep(0.1)


def test_a_standby_copy_holds_what_committed_and_the_takeover_restores_only_the_tail(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    async def main() -> None:
        kafka = KafkaConfig(bootstrap_servers=kafka_bootstrap)
        topic = unique_name("changelog")
        await ensure_topics(kafka, [TopicSpec(topic, 2, 1, {"cleanup.policy": "compact"})])
        producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=unique_name("tx"))
        await producer.start()
        stats = WorkerStats()
        states = PartitionStates(tmp_path, kafka, topic, StoreOptions(), stats)
        standby = StandbyStores(states, 2, stats)
        task = asyncio.get_running_loop().create_task(standby.run())
        try:
            await transaction(producer, topic, [(b"Ra", b"1"), (b"Rb", b"2")])
            await transaction(producer, topic, [(b"Rc", b"aborted")], commit=False)
            await transaction(producer, topic, [(b"Ra", None)])
            standby.own({1})  # this worker owns raw partition 1: partition 0 is copied
            await until(
                lambda: standby.partitions == [0] and stats.standby_lag == 0, 30, "the copy catches up"
            )
            assert applied(stats) == 3  # two records and a deletion; not the aborted one

            await transaction(
                producer, topic, [(b"Rd", b"4")]
            )  # the tail: committed after the copy caught up
            standby.own({0})  # assigned: the copy is closed at once, the takeover opens its directory
            assert standby.partitions == []
            states.assign({0})
            await states.restore({0})
            restored = restored_records(stats)
            copied = applied(stats)
            assert restored + copied == 4 and restored <= 1, (restored, copied)
            data = {k: v for k, v in states.store(0).items() if not k.startswith(META)}
            assert data == {b"Rb": b"2", b"Rd": b"4"}

            states.revoke({0})  # another worker owns it now: this one copies it again
            standby.disown({0})
            await transaction(producer, topic, [(b"Re", b"5")])
            await until(
                lambda: standby.partitions == [0] and applied(stats) == copied + 1,
                30,
                "the copy is kept again after the revoke",
            )
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            standby.close()
            states.close()
            await producer.stop()

    asyncio.run(main())
