"""The range deletions of one partition, kept as Cassandra's RangeTombstoneList keeps them.

Positions are byte-comparable bound positions (see clustering_order): a range covers every row key
strictly between its start and end. Overlapping ranges are split so that every point keeps the deletion
that supersedes (higher timestamp, then later local deletion time), and touching pieces with the same
deletion are joined. That normal form depends only on the set of deletions applied, never on their order
or repetition, which is what makes the merge commutative and idempotent.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from itertools import pairwise

from state.cell_merge import Deletion


class RangeTombstoneList:
    """Disjoint, sorted ``[start, end)`` pieces of bound positions, each with one Deletion."""

    __slots__ = ("deletions", "ends", "starts")

    def __init__(self) -> None:
        self.starts: list[bytes] = []
        self.ends: list[bytes] = []
        self.deletions: list[Deletion] = []

    def __len__(self) -> int:
        return len(self.starts)

    def __bool__(self) -> bool:
        return bool(self.starts)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RangeTombstoneList):
            return NotImplemented
        return (self.starts, self.ends, self.deletions) == (other.starts, other.ends, other.deletions)

    def __repr__(self) -> str:
        pieces = ", ".join(f"[{s.hex()}..{e.hex()}): {d}" for s, e, d in self)
        return f"RangeTombstoneList({pieces})"

    def __iter__(self) -> Iterator[tuple[bytes, bytes, Deletion]]:
        return iter(zip(self.starts, self.ends, self.deletions, strict=True))

    def covering(self, position: bytes) -> Deletion | None:
        """The deletion that covers a row key (or any position strictly inside a piece)."""
        i = bisect_right(self.starts, position) - 1
        if i >= 0 and position < self.ends[i]:
            return self.deletions[i]
        return None

    def add(self, start: bytes, end: bytes, deletion: Deletion) -> bool:
        """Merge one range deletion; True when the list changed."""
        if start >= end:
            return False
        # pieces that overlap or touch [start, end): their pieces are rebuilt together
        lo = bisect_left(self.ends, start)
        hi = bisect_right(self.starts, end)
        points = {start, end}
        for i in range(lo, hi):
            points.add(self.starts[i])
            points.add(self.ends[i])
        cuts = sorted(points)
        new_starts: list[bytes] = []
        new_ends: list[bytes] = []
        new_deletions: list[Deletion] = []
        j = lo
        for a, b in pairwise(cuts):
            while j < hi and self.ends[j] <= a:
                j += 1
            current = self.deletions[j] if j < hi and self.starts[j] <= a else None
            if start <= a and b <= end and (current is None or deletion > current):
                current = deletion
            if current is None:
                continue
            if new_ends and new_ends[-1] == a and new_deletions[-1] == current:
                new_ends[-1] = b
            else:
                new_starts.append(a)
                new_ends.append(b)
                new_deletions.append(current)
        if (
            new_starts == self.starts[lo:hi]
            and new_ends == self.ends[lo:hi]
            and new_deletions == self.deletions[lo:hi]
        ):
            return False
        self.starts[lo:hi] = new_starts
        self.ends[lo:hi] = new_ends
        self.deletions[lo:hi] = new_deletions
        return True

    def _keep(self, keep: list[bool]) -> bool:
        """Drop the pieces not kept and join touching pieces that now carry the same deletion."""
        if all(keep):
            return False
        pieces = [p for p, k in zip(self, keep, strict=True) if k]
        self.starts, self.ends, self.deletions = [], [], []
        for s, e, d in pieces:
            if self.ends and self.ends[-1] == s and self.deletions[-1] == d:
                self.ends[-1] = e
            else:
                self.starts.append(s)
                self.ends.append(e)
                self.deletions.append(d)
        return True

    def drop_shadowed(self, partition_deletion: Deletion) -> bool:
        """Forget pieces that a partition deletion supersedes (or equals)."""
        return self._keep([d > partition_deletion for d in self.deletions])

    def purge(self, gc_before: int) -> bool:
        """Forget pieces whose local deletion time is before ``gc_before`` (gc_grace has passed)."""
        return self._keep([d.local_deletion_time >= gc_before for d in self.deletions])

    def purgeable(self, gc_before: int) -> list[tuple[bytes, bytes]]:
        """The pieces ``purge(gc_before)`` would forget."""
        return [(s, e) for s, e, d in self if d.local_deletion_time < gc_before]

    def next_purge_time(self) -> int | None:
        return min((d.local_deletion_time for d in self.deletions), default=None)
