"""Errors of the worker layer; each message names the topic, partition, table or config key involved."""

from __future__ import annotations


class WorkerError(Exception):
    """The worker cannot go on (bad setup, unreachable service, state it cannot trust)."""


class TransactionFailed(WorkerError):
    """A Kafka transaction over state changelog, clean events and offsets did not commit.

    Nothing of the batch is visible to read_committed consumers and the local state is unchanged, so the
    batch can be merged again: by this worker once Kafka answers again, or, when ``fatal`` (another
    worker took over the transactional id), by whoever owns the partitions next.
    """

    def __init__(self, message: str, *, fatal: bool = False) -> None:
        super().__init__(message)
        self.fatal = fatal


class RecoveryError(WorkerError):
    """A partition's state could not be restored from its changelog."""
