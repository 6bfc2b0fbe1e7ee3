"""Warm copies of the raw partitions this worker does not own (``worker.standby_replicas``), as Kafka
Streams' standby tasks keep them: a takeover then applies only the changelog's tail.

Without them, a worker that takes a partition over after its owner died restores the partition's whole
state from the changelog (bench/failover.md: 32-39 s for 10M rows of state on a quiet 2-core machine, after the session timeout).
With them, the worker tails the changelog partitions of every raw partition it does not own, read_committed,
into stores in the same directories the takeover opens (``PartitionStates.path``). Their RocksDB memory is
the worker's: they share its block cache and memtable budget.

Exactly-once is untouched: a standby never writes to Kafka and emits nothing; it applies only committed
changelog records, in order, so its store is always the state at some committed changelog offset, which it
records with the data (``PartitionStore.restore``). A takeover still registers the partition's
transactional id first (fencing the previous owner and ending its open transaction), then restores from the
store's changelog offset to the changelog's end, as for a store that survived a restart.

Hand-over is synchronous: ``own`` closes the copies of newly assigned partitions before the takeover
opens their directories; ``disown`` (after the owner's stores closed) lets the loop open them as copies. A
fetch that was under way when either happened is dropped and fetched again from the stores' offsets.
"""

from __future__ import annotations

import asyncio
import logging

from aiokafka import TopicPartition
from aiokafka.errors import KafkaError

from app.partition_states import PartitionStates
from app.worker_stats import WorkerStats
from runtime.kafka_clients import stop_client
from state.errors import StoreError
from state.store.partition_store import PartitionStore

log = logging.getLogger(__name__)

STANDBY_BATCH_RECORDS = 5000
#: longest wait for changelog records, and so for a hand-over to be seen by the loop
POLL_MS = 500
#: wait before the loop tries again after Kafka failed it, or after a copy could not be opened
RETRY_S = 5.0


class StandbyStores:
    """Copies of the raw partitions this worker does not own, kept up to date from their changelog."""

    def __init__(self, states: PartitionStates, raw_partitions: int, stats: WorkerStats) -> None:
        self.states = states
        self.stats = stats
        self.every = set(range(raw_partitions))
        self._stores: dict[int, PartitionStore] = {}
        #: partitions this worker owns (or is taking over): never copied
        self._owned: set[int] = set()
        #: bumped at every hand-over: a fetch begun under another epoch is dropped
        self._epoch = 0
        #: set at the first assignment: until then every partition may be about to be owned
        self._assigned = asyncio.Event()

    @property
    def partitions(self) -> list[int]:
        return sorted(self._stores)

    def own(self, partitions: set[int]) -> None:
        """Partitions assigned to this worker: their copies are closed now, before the takeover opens their
        directories (and restores only what the copy had not applied)."""
        self._owned |= partitions
        for partition in partitions:
            store = self._stores.pop(partition, None)
            if store is not None:
                store.close()
        self._epoch += 1
        self._assigned.set()
        self._publish()

    def disown(self, partitions: set[int]) -> None:
        """Partitions revoked, their stores closed by their owner: copied from now on."""
        self._owned -= partitions
        self._epoch += 1

    async def run(self) -> None:
        """Keep the copies up to date until cancelled; Kafka failing is waited out (a copy is never
        needed for correctness, only for a quick takeover)."""
        await self._assigned.wait()
        while True:
            try:
                await self._tail()
            except (KafkaError, OSError, StoreError) as exc:
                log.warning("standby copies of raw partitions %s stopped (%r); again in %.0f s",
                            self.partitions, exc, RETRY_S)  # fmt: skip
                await asyncio.sleep(RETRY_S)

    async def _tail(self) -> None:
        consumer = await self.states.changelog_reader(STANDBY_BATCH_RECORDS)
        epoch: int | None = None
        tps: dict[int, TopicPartition] = {}
        try:
            while True:
                if epoch != self._epoch:
                    epoch = self._epoch
                    tps = self._reopen(consumer)
                if not tps:
                    await asyncio.sleep(POLL_MS / 1000)
                    continue
                batch = await consumer.getmany(timeout_ms=POLL_MS)
                positions = {p: await consumer.position(tp) for p, tp in tps.items()}
                if epoch != self._epoch:
                    continue  # handed over meanwhile: fetched again from the stores' offsets
                for tp, records in batch.items():
                    self._stores[tp.partition].restore(
                        [(r.key, r.value) for r in records], positions[tp.partition]
                    )
                    self.stats.standby_applied.inc(len(records))
                self.stats.standby_lag = self._lag(consumer, tps, positions)
        finally:
            await stop_client(consumer, f"the standby consumer of {self.states.changelog}")

    def _reopen(self, consumer: object) -> dict[int, TopicPartition]:
        """Close the copies no longer wanted, open the missing ones, and fetch each from its offset."""
        wanted = self.every - self._owned
        for partition in set(self._stores) - wanted:
            self._stores.pop(partition).close()
        for partition in sorted(wanted - set(self._stores)):
            try:
                self._stores[partition] = PartitionStore(
                    self.states.path(partition), partition, self.states.options
                )
            except StoreError as exc:  # its owner's store still open (a revoke under way)
                log.warning(
                    "cannot open the standby copy of raw partition %d (%s); trying again", partition, exc
                )
                asyncio.get_running_loop().call_later(RETRY_S, self._bump)
        tps = {p: TopicPartition(self.states.changelog, p) for p in self._stores}
        consumer.assign(list(tps.values()))  # type: ignore[attr-defined]
        for partition, tp in tps.items():
            consumer.seek(tp, self._stores[partition].changelog_offset)  # type: ignore[attr-defined]
        self._publish()
        if tps:
            log.info("standby copies of raw partitions %s", sorted(tps))
        return tps

    def _bump(self) -> None:
        self._epoch += 1

    @staticmethod
    def _lag(consumer: object, tps: dict[int, TopicPartition], positions: dict[int, int]) -> int | None:
        """Committed changelog records the copies have not applied; None while a partition's end is
        unknown (nothing fetched yet)."""
        lag = 0
        for partition, tp in tps.items():
            end = consumer.last_stable_offset(tp)  # type: ignore[attr-defined]
            if end is None:
                return None
            lag += max(0, end - positions[partition])
        return lag

    def _publish(self) -> None:
        self.stats.standby_partitions.set(len(self._stores))
        self.stats.standby_copies = self.partitions
        self.stats.standby_lag = None

    def close(self) -> None:
        for store in self._stores.values():
            store.close()
        self._stores.clear()
        self._publish()
