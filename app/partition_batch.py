"""One raw partition's share of a batch (or of an expiry pass), from its state transaction to its commit.

Each raw partition commits in a Kafka transaction of its own (its transactional id is the partition's, see
app/partition_producers.py), carrying exactly what that partition's store wrote, the change events and
dead letters of its raw records, and its offset; so a batch is one transaction per raw partition it
touched, and the batch loop keeps what belongs to each apart here.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from app.change_processor import CleanRecord, SetAsideExpiry
from app.raw_consumer import RawRecord
from app.transactional_sink import OpenTransaction
from app.worker_stats import BatchTally
from cassandra_model.table_schema import TableSchema
from state.store.transaction import StateTransaction


@dataclass(slots=True, frozen=True)
class DeadLetter:
    """A raw record that goes to the dead-letter topic instead of being merged, and why."""

    record: RawRecord
    #: one of worker_stats.DEAD_LETTER_REASONS
    kind: str
    reason: str


@dataclass(slots=True, eq=False)
class PartitionBatch:
    partition: int
    txn: StateTransaction
    tally: BatchTally = field(default_factory=BatchTally)
    #: change records not sent yet
    out: list[CleanRecord] = field(default_factory=list)
    dead: list[DeadLetter] = field(default_factory=list)
    #: stored partitions whose expiry failed, set aside in this transaction (for the dead-letter topic)
    expiries_aside: list[SetAsideExpiry] = field(default_factory=list)
    #: the raw offset the group resumes from once this commits (None: an expiry, which consumes nothing)
    next_offset: int | None = None
    #: its Kafka transaction, begun early when change records were sent before the commit
    tx: OpenTransaction | None = None
    #: change records sent before the commit
    sent: int = 0
    #: per table, the schema version whose dropped columns this transaction has shown (see
    #: ``ChangeProcessor.drops_to_show``)
    drops_shown: dict[uuid.UUID, TableSchema] = field(default_factory=dict)
    #: per table ("keyspace.table", as raw records' heads name it), the schema version its events are
    #: merged with straight from their bytes (``ChangeProcessor.merge_raw``): a table one of whose
    #: events the native merge took in this transaction (so its dropped columns were shown), while the
    #: worker's schemas are those of ``plain_at`` (``TableSchemas.changes``)
    plain: dict[str, TableSchema] = field(default_factory=dict)
    plain_at: int = -1

    def remember_plain(self, table: str, schema: TableSchema, schemas_at: int) -> None:
        """Merge ``table``'s next events with ``schema`` from their bytes, until the schemas change."""
        if self.plain_at != schemas_at:
            self.plain.clear()
            self.plain_at = schemas_at
        self.plain[table] = schema

    async def abandon(self) -> None:
        """Forget everything: the store is untouched, and what was sent early is aborted."""
        if self.txn.is_open:
            self.txn.rollback()
        tx, self.tx = self.tx, None
        if tx is not None:
            await tx.abort()
