"""Which prefix of a segment Kafka has fully acknowledged.

Events are sent in log order but acknowledged per Kafka partition, so acknowledgements arrive out of
order. An entry (one commit-log mutation, possibly several partition updates) counts as done when every
event it produced is acknowledged; the committed position is the end of the longest run of done entries
from where reading began. Entries that produced no event (non-CDC tables, skipped bytes) are done at once.

An entry is known by its end position. Only the last entry sent can still get events (the reader may be
in the middle of it); every entry before it is whole. The counts live in one dict and the order in one
deque of ends, so a batch of events costs a few C-level calls, not an object per event.
"""

from __future__ import annotations

from collections import Counter, deque


class AckTracker:
    def __init__(self, start: int) -> None:
        self.committed = start
        #: entries not yet committed, by end position in log order
        self._ends: deque[int] = deque()
        #: events sent and not yet acknowledged, per entry end
        self._pending: dict[int, int] = {}
        #: the end of the last entry while more of its events may come (None once a read ended after it)
        self._open: int | None = None

    @property
    def in_flight(self) -> int:
        """Events sent and not yet acknowledged."""
        return sum(self._pending.values())

    def sent(self, end: int) -> None:
        """One event of the entry ending at `end` was handed to the producer."""
        pending = self._pending
        if end in pending:
            pending[end] += 1
        else:
            self._ends.append(end)
            pending[end] = 1
        self._open = end

    def sent_many(self, ends: list[int]) -> None:
        """`sent` for each of `ends`, in log order (a batch of events)."""
        if not ends:
            return
        counts = Counter(ends)
        pending = self._pending
        first = ends[0]
        if first in pending:  # more events of the entry the previous batch ended in
            pending[first] += counts.pop(first)
        self._ends.extend(counts)  # the new entries' ends, in log order
        pending.update(counts)
        self._open = ends[-1]

    def acked(self, end: int) -> None:
        self._pending[end] -= 1
        self._advance()

    def acked_many(self, ends: list[int]) -> None:
        """`acked` for each of `ends` (the events of one acknowledged Kafka batch)."""
        pending = self._pending
        for end in ends:
            pending[end] -= 1
        self._advance()

    def read_until(self, position: int) -> None:
        """A read ended at `position`: every entry before it has all its events, the rest is done once acked."""
        self._open = None
        ends = self._ends
        if position > self.committed and (not ends or position > ends[-1]):
            ends.append(position)
            self._pending[position] = 0
        self._advance()

    def _advance(self) -> None:
        ends, pending, still_open = self._ends, self._pending, self._open
        committed = self.committed
        while ends:
            end = ends[0]
            if pending[end] or end == still_open:
                break
            ends.popleft()
            del pending[end]
            committed = max(committed, end)
        self.committed = committed
