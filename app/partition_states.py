"""The state stores of the raw-topic partitions this worker owns, and their restore from the changelog.

Every write to a partition's store is also a record in partition p of the compacted changelog topic,
written in the same Kafka transaction as the batch's clean events and offsets. A store remembers the
changelog offset it has applied; when a partition is assigned, the store catches up from there to the
changelog's last stable offset (read_committed, so aborted batches are never applied). An empty data
folder restores everything; a store that survived a restart replays only what it missed.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from aiokafka import AIOKafkaConsumer, TopicPartition

from app.errors import RecoveryError
from app.worker_stats import WorkerStats
from runtime.config import KafkaConfig
from runtime.kafka_clients import make_consumer, start_kafka_client, stop_client
from state.store.partition_store import PartitionStore, StoreOptions

log = logging.getLogger(__name__)

RESTORE_BATCH_RECORDS = 5000
#: a restore that reads nothing for this long before the changelog's end fails (Kafka went away), to be
#: retried with the batch
RESTORE_STALL_S = 30.0


def changelog_topic(app_id: str) -> str:
    return f"{app_id}.state-changelog"


class PartitionStates:
    """Open stores by partition; ``ready`` ones are restored and may be read and written."""

    def __init__(
        self,
        data_directory: Path,
        kafka: KafkaConfig,
        changelog: str,
        options: StoreOptions,
        stats: WorkerStats,
    ) -> None:
        self.data_directory = data_directory
        self.kafka = kafka
        self.changelog = changelog
        self.options = options
        self.stats = stats
        self.assigned: set[int] = set()
        self._stores: dict[int, PartitionStore] = {}

    def path(self, partition: int) -> Path:
        return self.data_directory / "state" / f"partition-{partition}"

    @property
    def ready(self) -> dict[int, PartitionStore]:
        return {p: s for p, s in self._stores.items() if p in self.assigned}

    def store(self, partition: int) -> PartitionStore:
        store = self._stores.get(partition)
        if store is None or partition not in self.assigned:
            raise RecoveryError(f"partition {partition} of the raw topic is not assigned to this worker")
        return store

    def assign(self, partitions: set[int]) -> None:
        """Note new partitions; they become ready with ``restore``."""
        self.assigned |= partitions
        self.stats.partitions_assigned.set(len(self.assigned))

    def revoke(self, partitions: set[int]) -> None:
        """Close the stores of partitions another worker now owns (it writes their changelog from now on)."""
        for partition in partitions:
            self.assigned.discard(partition)
            store = self._stores.pop(partition, None)
            if store is not None:
                store.close()
        self.stats.partitions_assigned.set(len(self.assigned))
        self.stats.partitions_ready.set(len(self._stores))

    def reset(self, partitions: set[int]) -> None:
        """Close the stores of ``partitions`` but keep them assigned: their state may be behind what Kafka
        committed (a transaction whose outcome is unknown), so they are restored again, caught up from the
        changelog, before anything reads or writes them."""
        for partition in partitions:
            store = self._stores.pop(partition, None)
            if store is not None:
                store.close()
        self.stats.partitions_ready.set(len(self._stores))

    def unrestored(self, partitions: set[int]) -> set[int]:
        return {p for p in partitions if p in self.assigned and p not in self._stores}

    async def restore(self, partitions: set[int]) -> None:
        """Open the stores of ``partitions`` and apply the changelog records they have not seen.

        Whatever interrupts it (an error, a cancelled agent), every store it opened is either registered
        or closed again, so no RocksDB lock is left behind."""
        if not partitions:
            return
        started = time.monotonic()
        stores: dict[int, PartitionStore] = {}
        try:
            for partition in sorted(partitions):
                stores[partition] = PartitionStore(self.path(partition), partition, self.options)
            applied = await self._catch_up(stores)
            self._stores.update(stores)
            stores = {}
        finally:
            for store in stores.values():
                store.close()
        self.stats.restored_records.inc(applied)
        self.stats.partitions_ready.set(len(self._stores))
        log.info(
            "restored partitions %s from %s: %d changelog records in %.2f s",
            sorted(partitions), self.changelog, applied, time.monotonic() - started,
        )  # fmt: skip

    async def changelog_reader(self, max_records: int) -> AIOKafkaConsumer:
        """A started consumer of the changelog that reads only what committed (no group, no offsets of
        its own: the stores keep theirs), ``max_records`` per fetch; for the restore and the standby
        copies."""
        consumer = make_consumer(
            self.kafka,
            isolation_level="read_committed",
            enable_auto_commit=False,
            max_poll_records=max_records,
        )
        await start_kafka_client(consumer, self.kafka)
        return consumer

    async def _catch_up(self, stores: dict[int, PartitionStore]) -> int:
        """Apply the committed changelog records each store has not applied yet; return how many."""
        consumer = await self.changelog_reader(RESTORE_BATCH_RECORDS)
        applied = 0
        try:
            tps = {p: TopicPartition(self.changelog, p) for p in stores}
            consumer.assign(list(tps.values()))
            ends = await consumer.end_offsets(list(tps.values()))
            pending: dict[int, int] = {}
            for partition, store in stores.items():
                start, end = store.changelog_offset, ends[tps[partition]]
                if start > end:
                    raise RecoveryError(
                        f"state of partition {partition} in {self.path(partition)} has applied changelog "
                        f"{self.changelog} up to offset {start}, but the topic ends at {end}: the topic was "
                        "recreated or truncated; delete the worker's data directory and restart"
                    )
                if start < end:
                    consumer.seek(tps[partition], start)
                    pending[partition] = end
                else:
                    consumer.pause(tps[partition])
            progress_at = time.monotonic()
            while pending:
                batch = await consumer.getmany(*[tps[p] for p in pending], timeout_ms=1000)
                for tp, records in batch.items():
                    position = await consumer.position(tp)
                    stores[tp.partition].restore([(r.key, r.value) for r in records], position)
                    applied += len(records)
                    progress_at = time.monotonic()
                for partition in list(pending):
                    if await consumer.position(tps[partition]) >= pending[partition]:
                        del pending[partition]
                if pending and time.monotonic() - progress_at > RESTORE_STALL_S:  # Kafka went away
                    raise TimeoutError(
                        f"restoring raw partitions {sorted(pending)} from {self.changelog}: no record for "
                        f"{RESTORE_STALL_S:.0f} s before the changelog's end"
                    )
        finally:
            await stop_client(consumer, f"the restore consumer of {self.changelog}")
        return applied

    def close(self) -> None:
        for store in self._stores.values():
            store.close()
        self._stores.clear()
