"""Digest keys a store committed lately, kept in memory so most replica copies skip a RocksDB read.

At three replicas two of every three raw events are copies of an update merged moments before (the
other nodes' agents publish it within seconds of each other). Each copy used to cost a RocksDB point
read, about 2 µs, to find its digest. The memo holds the digest keys of the last commits in two
generations: a lookup checks both, and when the current one is full the older one is dropped whole.
It only ever says "seen" for a digest the store holds (it follows every committed write and delete of a
digest key), and a miss falls through to RocksDB, so it changes the cost of a lookup, never its answer.
"""

from __future__ import annotations

#: digest keys per generation: two generations of 17-byte keys in sets take about 1.5 MB per store
DEFAULT_GENERATION = 8192


class RecentDigests:
    """A bounded set of recently committed digest keys."""

    __slots__ = ("_current", "_previous", "generation")

    def __init__(self, generation: int = DEFAULT_GENERATION) -> None:
        self.generation = generation
        self._current: set[bytes] = set()
        self._previous: set[bytes] = set()

    def __contains__(self, key: bytes) -> bool:
        return key in self._current or key in self._previous

    def __len__(self) -> int:
        return len(self._current) + len(self._previous)

    def add(self, key: bytes) -> None:
        self._current.add(key)
        if len(self._current) >= self.generation:
            self._previous, self._current = self._current, set()

    def discard(self, key: bytes) -> None:
        self._current.discard(key)
        self._previous.discard(key)
