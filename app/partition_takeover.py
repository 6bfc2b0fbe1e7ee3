"""Taking raw partitions over, and knowing where each one goes on: the worker's side of fencing.

A partition is taken over (at assignment, and again after any failed transaction) in three steps, always
in this order:

1. register its transactional id (app/partition_producers.py): the previous owner is fenced, and the
   coordinator finishes the transaction it left open (committed if its commit had been asked for);
2. restore its store from the changelog, read_committed: exactly what committed, that transaction
   included or not;
3. read where the group resumes it (app/group_offsets.py), and move the raw consumer there.

The store and the offset read after the registration agree with each other, whatever happened before.
From then on, the batch loop merges only records that continue exactly at that offset (``in_line``), and
moves it on with each commit (``committed``). That is also how a commit whose outcome is unknown is
settled: the partition is forgotten (``forget``) and taken over again; the records of that commit are then
below the group's offset if it committed, and merged again if it did not.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from app.group_offsets import GroupOffsets
from app.partition_producers import PartitionProducers
from app.partition_states import PartitionStates
from app.raw_consumer import RawRecord
from app.worker_stats import BatchTally

log = logging.getLogger(__name__)


@dataclass(slots=True, frozen=True)
class InDoubt:
    """A partition's transaction whose outcome was unknown: what it consumed up to, and what it did."""

    next_offset: int
    tally: BatchTally


class PartitionTakeover:
    """Which raw partitions this worker has taken over, and the offset each one goes on from."""

    def __init__(
        self,
        raw_topic: str,
        partitions: PartitionStates,
        producers: PartitionProducers,
        group_offsets: GroupOffsets,
        reposition: Callable[[int, int], None] | None = None,
    ) -> None:
        """``reposition(partition, offset)`` moves the raw consumer (None: nothing to move, in tests)."""
        self.raw_topic = raw_topic
        self.partitions = partitions
        self.producers = producers
        self.group_offsets = group_offsets
        self.reposition = reposition
        #: per partition taken over, the offset the group resumes from (None: it never committed one)
        self._next: dict[int, int | None] = {}
        #: partitions the raw consumer was moved back on, and where to (once per offset)
        self._rewound: dict[int, int] = {}
        #: transactions whose outcome is unknown, by partition, until it is taken over again
        self._doubt: dict[int, InDoubt] = {}

    def pending(self, partitions: set[int]) -> set[int]:
        """The assigned ones of ``partitions`` that are not taken over (yet, or again)."""
        return self.partitions.unrestored(partitions)

    async def acquire(self, partitions: set[int]) -> list[tuple[BatchTally, dict[int, int]]]:
        """Take ``partitions`` over (see the module docstring). Returns what the transactions in doubt on
        them did, with the offsets they committed, for those that turn out to have committed."""
        if not partitions:
            return []
        await self.producers.register(partitions)
        try:
            await self.partitions.restore(partitions)
            found = await self.group_offsets.read(partitions)
        except BaseException:
            self.partitions.reset(partitions)
            await self.producers.release(partitions)
            raise
        settled: list[tuple[BatchTally, dict[int, int]]] = []
        for partition in sorted(partitions):
            offset = found.get(partition)
            self._next[partition] = offset
            self._rewound.pop(partition, None)
            doubt = self._doubt.pop(partition, None)
            if doubt is not None and offset == doubt.next_offset:
                log.info(
                    "the transaction of raw partition %s[%d] whose outcome was unknown had committed (the "
                    "group resumes it at %d)",
                    self.raw_topic, partition, offset,
                )  # fmt: skip
                settled.append((doubt.tally, {partition: doubt.next_offset}))
            if offset is not None and self.reposition is not None:
                self.reposition(partition, offset)
        return settled

    async def forget(self, partition: int, doubt: InDoubt | None = None) -> None:
        """After a failed transaction: the partition is taken over again before it is used (its store may
        be behind what Kafka committed, its producer in any state). ``doubt``: the transaction may have
        committed."""
        self.partitions.reset({partition})
        await self.producers.release({partition})
        self._next.pop(partition, None)
        self._rewound.pop(partition, None)
        if doubt is not None:
            self._doubt[partition] = doubt

    async def release(self, partitions: set[int]) -> None:
        """Partitions revoked: their stores closed, their producers stopped, their offsets forgotten."""
        self.partitions.revoke(partitions)
        await self.producers.release(partitions)
        for partition in partitions:
            self._next.pop(partition, None)
            self._rewound.pop(partition, None)
            self._doubt.pop(partition, None)

    def position(self, partition: int) -> int | None:
        """Where the group resumes a partition taken over (None: it never committed one)."""
        return self._next.get(partition)

    def committed(self, partition: int, next_offset: int) -> None:
        self._next[partition] = next_offset

    def in_line(self, partition: int, records: list[RawRecord]) -> list[RawRecord]:
        """The records that continue the partition exactly where the group resumes it. Records below
        that offset were merged and committed already (fetched before the previous owner's last
        transaction finished, or by an attempt whose outcome was unknown): they are dropped. Records
        that start above it leave a gap: the consumer is moved back once, and those come again; a gap
        still there after that (records deleted by retention before they were merged) is passed over."""
        expected = self._next.get(partition)
        if expected is None or records[0].offset == expected:
            return records
        if records[0].offset < expected:
            records = [r for r in records if r.offset >= expected]
            if not records or records[0].offset == expected:
                return records
        first = records[0].offset
        if self.reposition is not None and self._rewound.get(partition) != expected:
            self._rewound[partition] = expected
            log.warning(
                "raw partition %s[%d] was handed over from offset %d, but the group resumes it at %d: moved back",
                self.raw_topic, partition, first, expected,
            )  # fmt: skip
            self.reposition(partition, expected)
            return []
        log.warning(
            "raw records %s[%d] from %d to %d are gone (deleted by retention before they were merged?); "
            "going on from %d",
            self.raw_topic, partition, expected, first - 1, first,
        )  # fmt: skip
        return records
