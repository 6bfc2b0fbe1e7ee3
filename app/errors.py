"""Errors of the worker layer; each message names the topic, partition, table or config key involved."""

from __future__ import annotations


class WorkerError(Exception):
    """The worker cannot go on (bad setup, unreachable service, state it cannot trust)."""


class TransactionFailed(WorkerError):
    """A Kafka transaction over state changelog, clean events and offsets did not commit.

    Nothing of the batch is visible to read_committed consumers and the local state is unchanged, so
    the worker stops and the batch is processed again by whoever owns the partitions next.
    """


class RecoveryError(WorkerError):
    """A partition's state could not be restored from its changelog."""
