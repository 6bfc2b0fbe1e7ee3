"""One transactional producer per raw partition this worker owns: the fence against a worker that lost it.

A worker that stalls past its session timeout (a long pause, SIGSTOP, a machine that froze) loses its raw
partitions to another worker, yet it does not know that yet when it wakes up: it may still hold a batch
merged on a store that is no longer the partition's, and commit it. Kafka's answer is the transactional
id. The transactional id of raw partition p is ``<app_id>-<p>`` whoever owns p, so the worker that takes p
over registers it first (``register``), which fences every earlier producer of p: the old owner's next
step (a send, its commit) fails as fenced, and the transaction it left open is finished by the
coordinator before the new owner reads anything (committed if its commit had been asked for, aborted
otherwise). Only then does the new owner restore p's state from the changelog and read where the group
resumes p (app/batch_loop.py), so it starts from exactly what committed.

This is the scheme Kafka used before KIP-447 (Kafka Streams' "exactly_once", Faust's own): aiokafka sends
offsets with the group id alone (TxnOffsetCommit v0-v2, no member or generation) and cannot fence by
group membership. It costs one producer and one transaction per raw partition a batch touches; the
commits of one batch run concurrently (see bench/transaction_scheme.md for what that costs).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from app.errors import TransactionFailed
from app.transactional_sink import TransactionalSink
from runtime.config import KafkaConfig

log = logging.getLogger(__name__)


def partition_transactional_id(app_id: str, partition: int) -> str:
    """The transactional id of a raw partition: the same for every worker of ``app_id``."""
    return f"{app_id}-{partition}"


class PartitionProducers:
    """The registered producers of the raw partitions this worker owns, by partition."""

    def __init__(self, kafka: KafkaConfig, app_id: str, *, transaction_timeout_ms: int) -> None:
        self.kafka = kafka
        self.app_id = app_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self._sinks: dict[int, TransactionalSink] = {}

    def transactional_id(self, partition: int) -> str:
        return partition_transactional_id(self.app_id, partition)

    @property
    def registered(self) -> set[int]:
        return set(self._sinks)

    async def register(self, partitions: set[int]) -> None:
        """Register the transactional ids of ``partitions`` (again, for one registered before), all at
        once: this fences their earlier producers, in this worker or another, and finishes the
        transactions they left open. Call it only for partitions the group gave this worker."""
        if not partitions:
            return
        await self.release(partitions)
        sinks = {
            p: TransactionalSink(
                self.kafka, self.transactional_id(p), transaction_timeout_ms=self.transaction_timeout_ms
            )
            for p in sorted(partitions)
        }
        results = await asyncio.gather(*(sink.start() for sink in sinks.values()), return_exceptions=True)
        failed = [r for r in results if isinstance(r, BaseException)]
        for partition, sink in sinks.items():
            if sink.started:
                self._sinks[partition] = sink
        if failed:
            await self.release(partitions)  # registered again, all together, at the next attempt
            raise failed[0]
        log.info("registered the transactional ids of raw partitions %s", sorted(partitions))

    def sink(self, partition: int) -> TransactionalSink:
        sink = self._sinks.get(partition)
        if sink is None:
            raise TransactionFailed(
                f"no transactional producer for raw partition {partition} "
                f"({self.transactional_id(partition)}): it is not registered"
            )
        return sink

    async def release(self, partitions: set[int]) -> None:
        """Stop the producers of ``partitions`` (revoked, or to be registered again)."""
        for partition in sorted(partitions):
            sink = self._sinks.pop(partition, None)
            if sink is not None:
                with contextlib.suppress(Exception):
                    await sink.stop()

    async def stop(self) -> None:
        await self.release(set(self._sinks))
