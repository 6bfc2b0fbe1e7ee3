"""Errors of the merge core: each names what could not be merged and why."""

from __future__ import annotations

from cassandra_model.errors import ClusteringValueError

__all__ = ["ClusteringValueError", "CounterContextError", "StateError", "StoreError"]


class StateError(ValueError):
    """A raw event or value the merge core cannot apply (malformed, or for another partition)."""


class CounterContextError(StateError):
    """A counter cell whose CounterContext cannot be merged (malformed, or pre-2.1 local shards)."""


class StoreError(StateError):
    """The stored state cannot be read or written as asked (unknown format, wrong partition, misuse)."""
