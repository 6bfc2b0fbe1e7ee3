"""Errors of the merge core: each names what could not be merged and why.

A clustering value that does not fit its type is the model's ``ClusteringValueError``: the ordering of
CQL values lives in ``cassandra_model.clustering_order``.
"""

from __future__ import annotations


class StateError(ValueError):
    """A raw event or value the merge core cannot apply (malformed, or for another partition)."""


class CounterContextError(StateError):
    """A counter cell whose CounterContext cannot be merged (malformed, or pre-2.1 local shards)."""


class StoreError(StateError):
    """The stored state cannot be read or written as asked (unknown format, wrong partition, misuse)."""
