"""Errors of the worker layer; each message names the topic, partition, table or config key involved."""

from __future__ import annotations


class WorkerError(Exception):
    """The worker cannot go on (bad setup, unreachable service, state it cannot trust)."""


class TransactionFailed(WorkerError):
    """A Kafka transaction over state changelog, clean events and offsets did not commit.

    Nothing of the batch is visible to read_committed consumers and the local state is unchanged, so the
    batch can be merged again: by this worker once Kafka answers again, or, when ``fatal`` (another
    worker took over the transactional id: this one lost the partition), by whoever owns the partitions
    next.
    """

    def __init__(self, message: str, *, fatal: bool = False) -> None:
        super().__init__(message)
        self.fatal = fatal


class TransactionInDoubt(TransactionFailed):
    """The commit of a transaction was asked for, and no answer came (a timeout, a connection cut after
    the request left): the transaction may have committed or not.

    Only the transaction coordinator knows; registering the transactional id again makes it finish the
    transaction either way, and the committed changelog and offsets then tell which it was. Never
    fatal in itself."""


class RecoveryError(WorkerError):
    """A partition's state could not be restored from its changelog."""
