"""Which prefix of a segment Kafka has fully acknowledged.

Events are sent in log order but acknowledged per Kafka partition, so acknowledgements arrive out of
order. An entry (one commit-log mutation, possibly several partition updates) counts as done when every
event it produced is acknowledged; the committed position is the end of the longest run of done entries
from where reading began. Entries that produced no event (non-CDC tables, skipped bytes) are done at once.
"""

from __future__ import annotations

from collections import deque


class _Entry:
    __slots__ = ("end", "pending", "sealed")

    def __init__(self, end: int) -> None:
        self.end = end
        self.pending = 0
        self.sealed = False


class AckTracker:
    def __init__(self, start: int) -> None:
        self.committed = start
        self._entries: deque[_Entry] = deque()
        self._by_end: dict[int, _Entry] = {}

    @property
    def in_flight(self) -> int:
        """Events sent and not yet acknowledged."""
        return sum(e.pending for e in self._entries)

    def sent(self, end: int) -> None:
        """One event of the entry ending at `end` was handed to the producer."""
        entry = self._by_end.get(end)
        if entry is None:
            if self._entries and not self._entries[-1].sealed:
                self._entries[-1].sealed = True  # a new entry begins: the previous one has all its events
            entry = _Entry(end)
            self._entries.append(entry)
            self._by_end[end] = entry
        entry.pending += 1

    def sent_many(self, ends: list[int]) -> None:
        """`sent` for each of `ends`, in log order (a batch of events)."""
        entries, by_end = self._entries, self._by_end
        for end in ends:
            entry = by_end.get(end)
            if entry is None:
                if entries and not entries[-1].sealed:
                    entries[-1].sealed = True
                entry = _Entry(end)
                entries.append(entry)
                by_end[end] = entry
            entry.pending += 1

    def acked(self, end: int) -> None:
        entry = self._by_end[end]
        entry.pending -= 1
        self._advance()

    def acked_many(self, ends: list[int]) -> None:
        """`acked` for each of `ends` (the events of one acknowledged Kafka batch)."""
        by_end = self._by_end
        for end in ends:
            by_end[end].pending -= 1
        self._advance()

    def read_until(self, position: int) -> None:
        """A read ended at `position`: every entry before it has all its events, the rest is done once acked."""
        for entry in self._entries:
            entry.sealed = True
        if position > self.committed and (not self._entries or position > self._entries[-1].end):
            marker = _Entry(position)
            marker.sealed = True
            self._entries.append(marker)
            self._by_end[position] = marker
        self._advance()

    def _advance(self) -> None:
        entries = self._entries
        while entries and entries[0].sealed and entries[0].pending == 0:
            entry = entries.popleft()
            del self._by_end[entry.end]
            self.committed = max(self.committed, entry.end)
