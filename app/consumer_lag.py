"""How far a worker is behind: raw records it has not committed yet, and how stale its clean topics are.

**Records behind**, per raw partition the worker owns: the partition's end (its high watermark, as the
last fetch response for it told the raw consumer) minus the next offset committed for the worker group
(by this worker's own transactions, or as the group had it when the partition was assigned). Records
already fetched but not merged and committed count as behind. The end is only as fresh as the last fetch
of that partition: while a partition's fetched records wait for the batch loop, its end is not asked
again, so the figure is then a lower bound.

**Milliseconds behind**, for the whole worker, with W the newest Cassandra write time of the raw events
it merged and committed since it started, and C the last time it saw nothing waiting:

- 0 while no record waits on any partition it owns: an idle pipeline is not behind, however old its last
  write is;
- while records wait: now - max(W, C), never below 0. W alone would report a long quiet spell before a
  burst as lag (the clean topics were complete until the burst); C alone would ignore what a busy worker
  that never catches up did merge. It grows by a second per second while records wait and nothing newer
  is merged;
- unknown (None; no Prometheus sample) while a partition's figures are not known yet (no fetch response,
  or its committed offset not read yet) and none is known to be behind, or when neither W nor C is known.

**Unknown, not 0**, every figure, while the worker owns no raw partition (it starts, its group rebalances,
or it has more workers than the raw topic has partitions: it cannot tell whether the group's input waits)
and while Kafka does not answer (``blind``: the ends the last fetches saw may be long past); once it
answers again, a partition's end counts only from a fetch response after that. A figure of 0 is a claim
that nothing waits; a monitor or `cdc verify` waiting for it must never read it from a worker
that cannot know. ``LagFigures.unknown`` says why (for `/stats` and `/health`).

Nothing here runs per raw event or asks Kafka anything: the figures are computed when asked (a scrape,
`/stats`, a heartbeat, a commit) from the consumer's high watermarks and the offsets the batch loop commits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass


def _unknown(partition: int) -> int | None:
    return None


@dataclass(slots=True, frozen=True)
class LagFigures:
    """The worker's lag at one moment (see the module docstring for each figure's definition)."""

    #: raw records behind per owned partition (None: not known yet)
    records_behind: dict[int, int | None]
    ms_behind: int | None
    #: W, in ms since the epoch (None: nothing merged and committed since the worker started)
    newest_write_ms: int | None
    #: next raw offset committed per owned partition, where known
    committed: dict[int, int]
    #: why some figure is not known (None: every one is)
    unknown: str | None = None

    @property
    def caught_up(self) -> bool:
        """Nothing waits on any owned partition (the worker owns one, and every figure is known and 0)."""
        return bool(self.records_behind) and all(n == 0 for n in self.records_behind.values())

    @property
    def total_records_behind(self) -> int | None:
        """Records behind on all owned partitions together (None while one is not known, or none owned)."""
        counts = self.records_behind.values()
        if not counts or any(n is None for n in counts):
            return None
        return sum(n for n in counts if n is not None)

    def as_dict(self) -> dict[str, object]:
        """The `lag` section of `/stats` (partitions as strings: JSON keys)."""
        return {
            "records_behind": self.total_records_behind,
            "records_behind_by_partition": {str(p): n for p, n in sorted(self.records_behind.items())},
            "ms_behind": self.ms_behind,
            "newest_write_ms": self.newest_write_ms,
            "committed_offsets": {str(p): o for p, o in sorted(self.committed.items())},
            "unknown_reason": self.unknown,
        }


class ConsumerLag:
    """The offsets and write times behind the lag figures of one worker.

    The batch loop reports each committed transaction (``on_commit``); the worker reports assignments,
    the group's committed offsets at assignment (``start_at``) and where high watermarks are read
    (``watch``)."""

    def __init__(self) -> None:
        self._highwater: Callable[[int], int | None] = _unknown
        #: owned partitions and their next committed offset (None: not known yet)
        self._committed: dict[int, int | None] = {}
        self._newest_write_us: int | None = None
        self._caught_up_ms: int | None = None
        self._blind: str | None = None
        self._fetched_at: Callable[[int], int | None] | None = None
        #: when Kafka was last seen answering again after it did not (ms since the epoch)
        self._sighted_ms = 0

    def watch(
        self, highwater: Callable[[int], int | None], fetched_at: Callable[[int], int | None] | None = None
    ) -> None:
        """Where a raw partition's end is read: the raw consumer's last fetch response, no request; and
        when that response came (ms since the epoch; None: no such clock, every end is current)."""
        self._highwater = highwater
        self._fetched_at = fetched_at

    def blind(self, reason: str | None, now_ms: int) -> None:
        """While ``reason`` is set (Kafka does not answer), no figure is known; None: Kafka answers, and
        each partition's end is known again from its next fetch response on."""
        if reason is None and self._blind is not None:
            self._sighted_ms = now_ms
        self._blind = reason

    def _end(self, partition: int) -> int | None:
        if self._blind is not None:
            return None
        if self._fetched_at is not None and self._sighted_ms:
            fetched = self._fetched_at(partition)
            if fetched is None or fetched < self._sighted_ms:
                return None  # fetched before the outage: records may have come since
        return self._highwater(partition)

    @property
    def partitions(self) -> list[int]:
        return sorted(self._committed)

    def assign(self, partitions: Iterable[int]) -> None:
        for partition in partitions:
            self._committed.setdefault(partition, None)

    def revoke(self, partitions: Iterable[int]) -> None:
        for partition in partitions:
            self._committed.pop(partition, None)

    def start_at(self, offsets: Mapping[int, int]) -> None:
        """The group's committed offsets of newly assigned partitions (where this worker resumes). A
        commit of this worker's that got there first is newer and stays."""
        for partition, offset in offsets.items():
            if partition in self._committed:
                known = self._committed[partition]
                self._committed[partition] = offset if known is None else max(known, offset)

    def figures(
        self,
        now_ms: int,
        *,
        offsets: Mapping[int, int] | None = None,
        newest_write_us: int | None = None,
    ) -> LagFigures:
        """The figures now, as they will be once ``offsets`` (next offset per raw partition) and a merge
        of writes up to ``newest_write_us`` are committed; changes nothing (a heartbeat in a transaction
        that may still fail describes that transaction's outcome)."""
        committed = dict(self._committed)
        for partition, offset in (offsets or {}).items():
            if partition in committed:
                known = committed[partition]
                committed[partition] = offset if known is None else max(known, offset)
        behind: dict[int, int | None] = {}
        for partition, position in committed.items():
            end = self._end(partition)
            behind[partition] = None if position is None or end is None else max(0, end - position)
        newest_us = _newest(self._newest_write_us, newest_write_us)
        newest_ms = None if newest_us is None else newest_us // 1000
        unknown = _why_unknown(behind, self._blind)
        ms_behind: int | None = None
        if behind and all(n == 0 for n in behind.values()):
            ms_behind = 0
        elif any(n for n in behind.values()):  # some partition is known to be behind
            reference = _newest(newest_ms, self._caught_up_ms)
            ms_behind = None if reference is None else max(0, now_ms - reference)
        known = {p: o for p, o in committed.items() if o is not None}
        return LagFigures(behind, ms_behind, newest_ms, known, unknown)

    def observe(self, now_ms: int) -> LagFigures:
        """The figures now; when nothing waits, now becomes the last time the worker was caught up."""
        figures = self.figures(now_ms)
        if figures.caught_up:
            self._caught_up_ms = now_ms
        return figures

    def on_commit(self, offsets: Mapping[int, int], newest_write_us: int | None, now_ms: int) -> LagFigures:
        """A transaction committed: the next offsets of the raw partitions it consumed, and the newest
        write time of the events it merged (None: none)."""
        self.start_at(offsets)
        self._newest_write_us = _newest(self._newest_write_us, newest_write_us)
        return self.observe(now_ms)


def _why_unknown(behind: Mapping[int, int | None], blind: str | None) -> str | None:
    if blind is not None:
        return blind
    if not behind:
        return (
            "this worker owns no raw partition (starting, rebalancing, or more workers than raw partitions)"
        )
    missing = sorted(p for p, n in behind.items() if n is None)
    if missing:
        return (
            f"raw partition(s) {', '.join(map(str, missing))}: no fetch response or committed offset yet "
            "(just assigned, or restoring)"
        )
    return None


def _newest(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    return a if b is None or a >= b else b
