"""Finding the segments Cassandra deleted from cdc_raw before the agent read them.

With `cdc_block_writes: false` (Cassandra 4.1+) a full cdc_raw does not reject CDC writes: each new
segment makes Cassandra delete the oldest segments of cdc_raw and their indexes, read or not. The rules
below rest on what Cassandra 5.0 does (CommitLogSegmentManagerCDC, CommitLogSegment, CommitLogReplayer):

1. A segment is hard-linked into cdc_raw when it is created, before anything is written to it (with
   `cdc_block_writes: true` a segment created while cdc_raw is full is linked later, or never: then no CDC
   write went into it). Ids are consecutive within one run of a node: the first is the clock in ms at
   start (or the highest id on disk + 1), then one more per segment, with or without CDC data.
2. `_cdc.idx` exists only for a segment holding CDC data: Cassandra writes it at each sync and at close
   (with COMPLETED), even after the link was deleted.
3. Cassandra removes a link itself only (a) at discard, when the segment held no CDC data, (b) at start,
   a link without an index, (c) when cdc_raw is full and `cdc_block_writes` is false: the oldest links
   with their indexes, in id order, up to the segment being written. (c) always deletes a prefix of
   cdc_raw sorted by id.

Hence, between two looks at cdc_raw (or across the agent's downtime, thanks to the ledger):

- a segment whose index the agent had seen, gone without the agent releasing it, before the agent read it
  to its end: CDC data was lost (certain);
- an index without its segment, of a segment the agent did not release: the same;
- a segment the agent saw without an index, or an id it never saw at all (it was away), held no CDC data
  if any segment the agent knew before and older than it is still there (a deletion by (c) would have
  taken that one first); otherwise it may have been deleted unread ("unaccounted"). This is judged at
  the first look after a start only: a running agent sees every link as it is made (1), so one deleted
  with CDC data in it shows as lost, and ids it never saw (a node's restart) held none.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from agents.cdc_raw import CdcSegment, OrphanIndex
from agents.segment_gaps import Finding, FirstAfter, LostSegment
from agents.segment_ledger import EventMark, PendingGap, SegmentEntry, SegmentLedger


class GapDetector:
    def __init__(self, ledger: SegmentLedger) -> None:
        self.ledger = ledger
        self._looked = False

    # -- what the agent tells ----------------------------------------------------------------------------

    def record_reading(
        self,
        segment_id: int,
        *,
        read_position: int,
        acknowledged_position: int,
        read_to_end: bool,
        first_event: EventMark | None,
        last_event: EventMark | None,
    ) -> None:
        """How far the agent got in a segment it tracks."""
        entry = self.ledger.segments.get(segment_id)
        if entry is None:
            return
        reading = (read_position, acknowledged_position, read_to_end, first_event, last_event)
        if reading != _reading(entry):
            entry.read_position, entry.acknowledged_position = read_position, acknowledged_position
            entry.read_to_end, entry.first_event, entry.last_event = read_to_end, first_event, last_event
            self.ledger.dirty = True

    def released(self, segment_id: int) -> None:
        """The agent is about to delete or archive the segment: its disappearance is no gap."""
        ledger = self.ledger
        entry = ledger.segments.pop(segment_id, None)
        ledger.released.append(segment_id)
        if entry is not None and entry.last_event is not None:
            previous = ledger.last_released_event
            if previous is None or entry.last_event.segment_id >= previous.segment_id:
                ledger.last_released_event = entry.last_event
        ledger.dirty = True

    def first_event(self, segment_id: int) -> EventMark | None:
        entry = self.ledger.segments.get(segment_id)
        return None if entry is None else entry.first_event

    # -- one look at cdc_raw -------------------------------------------------------------------------------

    def observe(
        self, segments: list[CdcSegment], orphans: list[OrphanIndex], *, now: float
    ) -> Finding | None:
        """Compare cdc_raw with the ledger, then bring the ledger up to date; what went missing, if anything."""
        ledger = self.ledger
        present = {s.name.segment_id: s for s in segments}
        orphan_by_id = {o.name.segment_id: o for o in orphans if o.name.segment_id not in present}
        released = set(ledger.released)
        known = dict(ledger.segments)
        anchor = min((sid for sid in known if sid in present), default=None)

        lost, without_index = self._vanished(set(known) - set(present), orphan_by_id, released)
        lost += self._orphaned(orphan_by_id, set(known) | released)

        # Ids are unaccounted for only at the first look after a start: while the agent runs it sees every
        # link Cassandra makes, and a segment deleted with CDC data in it shows as lost (rule 1 and 2).
        first_look, self._looked = not self._looked, True
        unaccounted: list[tuple[int, int]] = []
        if first_look:
            unseen = self._unseen(set(present) | set(orphan_by_id))
            if anchor is None:
                unaccounted = _ranges(without_index, unseen)
            else:
                unaccounted = _ranges([sid for sid in without_index if sid < anchor], [])

        self._note_present(segments, now)
        if orphan_by_id or present:
            top = max(set(present) | set(orphan_by_id))
            if ledger.highest_seen is None or top > ledger.highest_seen:
                ledger.highest_seen = top
                ledger.dirty = True
        if not lost and not unaccounted:
            return None
        finding = Finding(lost, unaccounted)
        finding.last_read_before = self._last_read_before(finding.lowest_id, lost, known)
        above = [sid for sid in present if sid > finding.highest_id]
        if above:
            entry = ledger.segments[min(above)]
            finding.first_after = FirstAfter(entry.segment_id, entry.first_seen, entry.segment_modified)
        return finding

    def _vanished(
        self, gone: set[int], orphan_by_id: dict[int, OrphanIndex], released: set[int]
    ) -> tuple[list[LostSegment], list[int]]:
        """Known segments no longer in cdc_raw: those lost (rules 1 and 2), and the ids of those that never
        had an index (no CDC data seen)."""
        ledger = self.ledger
        lost: list[LostSegment] = []
        without_index: list[int] = []
        for sid in sorted(gone):
            entry = ledger.segments.pop(sid)
            ledger.dirty = True
            if sid in released:
                continue
            orphan = orphan_by_id.get(sid)
            if orphan is not None:  # Cassandra deleted the link, then wrote the index again
                ledger.reported_orphans.add(sid)
                if orphan.index is not None:
                    entry.cdc_index_offset, entry.completed = orphan.index.offset, orphan.index.completed
                entry.index_modified = _mtime(orphan.path) or entry.index_modified
            if entry.cdc_index_offset is None:
                without_index.append(sid)
            elif not entry.read_to_end:
                lost.append(_lost(entry, "deleted_unread"))
        return lost, without_index

    def _orphaned(self, orphan_by_id: dict[int, OrphanIndex], accounted: set[int]) -> list[LostSegment]:
        """Indexes without their segment, of segments the agent neither knew nor released (rule 2)."""
        ledger = self.ledger
        lost = []
        for sid, orphan in sorted(orphan_by_id.items()):
            if sid in accounted or sid in ledger.reported_orphans:
                continue
            ledger.reported_orphans.add(sid)
            ledger.dirty = True
            index = orphan.index
            lost.append(
                LostSegment(
                    sid,
                    orphan.name.version,
                    "index_without_segment",
                    cdc_index_offset=None if index is None else index.offset,
                    completed=index is not None and index.completed,
                    index_modified=_mtime(orphan.path),
                )
            )
        if not ledger.reported_orphans <= set(orphan_by_id):
            ledger.reported_orphans &= set(orphan_by_id)  # remembered only while the file is there
            ledger.dirty = True
        return lost

    def _unseen(self, ids: set[int]) -> list[tuple[int, int]]:
        """Ranges of ids between the highest id seen before and the new ids, that never showed."""
        highest = self.ledger.highest_seen
        if highest is None:
            return []  # a first start: nothing to compare with
        ranges = []
        previous = highest
        for sid in sorted(i for i in ids if i > highest):
            if sid > previous + 1:
                ranges.append((previous + 1, sid - 1))
            previous = sid
        return ranges

    def _note_present(self, segments: list[CdcSegment], now: float) -> None:
        ledger = self.ledger
        for segment in segments:
            sid = segment.name.segment_id
            entry = ledger.segments.get(sid)
            if entry is None:
                entry = ledger.segments[sid] = SegmentEntry(sid, now, segment.name.version)
                ledger.dirty = True
            modified = (_mtime(segment.path), _mtime(segment.index_path))
            if modified != (entry.segment_modified, entry.index_modified):
                entry.segment_modified, entry.index_modified = modified
                ledger.dirty = True
            index = segment.index
            if index is not None and (index.offset, index.completed) != (
                entry.cdc_index_offset,
                entry.completed,
            ):
                entry.cdc_index_offset, entry.completed = index.offset, index.completed
                ledger.dirty = True
            elif index is None and segment.index_error is not None and entry.cdc_index_offset is None:
                entry.cdc_index_offset = 0  # an index is there, unreadable: the segment holds CDC data
                ledger.dirty = True

    def _last_read_before(
        self, lowest: int, lost: list[LostSegment], known: dict[int, SegmentEntry]
    ) -> EventMark | None:
        """The last event read at or before the first missing segment."""
        marks = [s.last_event for s in lost] + [e.last_event for e in known.values()]
        marks.append(self.ledger.last_released_event)
        before = [m for m in marks if m is not None and m.segment_id <= lowest]
        return max(before, key=lambda m: (m.segment_id, m.position), default=None)

    # -- gaps, from finding to acknowledgement -----------------------------------------------------------

    def record(self, record: dict[str, object]) -> PendingGap:
        """Keep a gap record until an operator acknowledges it (and until Kafka has it)."""
        gap = PendingGap(dict(record))
        self.ledger.gaps.append(gap)
        self.ledger.dirty = True
        return gap

    @property
    def unacknowledged(self) -> list[PendingGap]:
        return [g for g in self.ledger.gaps if not g.acknowledged]

    def unpublished(self) -> list[PendingGap]:
        return [g for g in self.ledger.gaps if not g.published]

    def published(self, gap_id: str) -> None:
        for gap in self.ledger.gaps:
            if gap.gap_id == gap_id and not gap.published:
                gap.published = True
                self.ledger.dirty = True
        self._forget_done()

    def acknowledge(self) -> list[str]:
        """Acknowledge every gap: an operator has taken note (the records stay on the gap topic; one that
        Kafka does not have yet is still sent)."""
        ids = [g.gap_id for g in self.unacknowledged]
        for gap in self.unacknowledged:
            gap.acknowledged = True
            self.ledger.dirty = True
        self._forget_done()
        return ids

    def _forget_done(self) -> None:
        kept = [g for g in self.ledger.gaps if not (g.published and g.acknowledged)]
        if len(kept) != len(self.ledger.gaps):
            self.ledger.gaps = kept
            self.ledger.dirty = True


def _reading(entry: SegmentEntry) -> tuple[int, int, bool, EventMark | None, EventMark | None]:
    return (
        entry.read_position,
        entry.acknowledged_position,
        entry.read_to_end,
        entry.first_event,
        entry.last_event,
    )


def _lost(entry: SegmentEntry, how: str) -> LostSegment:
    return LostSegment(
        entry.segment_id,
        entry.version,
        how,
        cdc_index_offset=entry.cdc_index_offset,
        completed=entry.completed,
        read_position=entry.read_position,
        acknowledged_position=entry.acknowledged_position,
        first_seen=entry.first_seen or None,
        segment_modified=entry.segment_modified,
        index_modified=entry.index_modified,
        last_event=entry.last_event,
    )


def _ranges(ids: Iterable[int], ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Single ids and inclusive ranges merged into sorted, non-adjacent inclusive ranges."""
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted([(i, i) for i in ids] + list(ranges)):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
        else:
            merged.append((lo, hi))
    return merged


def _mtime(path: Path) -> float | None:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None
