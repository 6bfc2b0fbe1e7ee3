"""What the agent has seen of cdc_raw, kept across restarts, so that segments deleted behind its back show.

With `cdc_block_writes: false` Cassandra deletes the oldest segments of a full cdc_raw, read or not. The
agent can only tell such a loss from the normal comings and goings of cdc_raw if it remembers what was
there: every segment it saw and has not released, whether Cassandra had written its `_cdc.idx` (only a
segment holding CDC data gets one) and up to which offset, how far the agent read it, the files' mtimes,
and the highest segment id it ever saw. Segments the agent released itself are remembered for a while so
that their leftovers (an index whose unlink failed) are not mistaken for Cassandra's deletions. Gaps that
were found and not yet acknowledged stay here too: the health endpoint reports them after a restart, and
one that was never acknowledged by Kafka is sent again.

The file is `<state_directory>/cdc_raw_ledger.json`, replaced durably like offsets.json.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agents.durable_file import write_durably
from agents.errors import LedgerError

_FORMAT = 1
#: segments released by the agent that are remembered (their ids only)
RELEASED_KEPT = 256


@dataclass(slots=True, frozen=True)
class EventMark:
    """One event the agent read: its segment, where its entry ends, and its write time (the largest
    timestamp in it, µs)."""

    segment_id: int
    position: int
    write_time_us: int


@dataclass(slots=True)
class SegmentEntry:
    """One segment the agent saw in cdc_raw and has not released."""

    segment_id: int
    first_seen: float
    """Wall-clock time (s) the agent first saw the hard link."""
    version: int = 0
    """Descriptor version in the file name."""
    segment_modified: float | None = None
    index_modified: float | None = None
    cdc_index_offset: int | None = None
    """The durable offset Cassandra last reported in `_cdc.idx`; None while there was no index, which
    Cassandra writes only for a segment holding CDC data."""
    completed: bool = False
    read_position: int = 0
    acknowledged_position: int = 0
    read_to_end: bool = False
    first_event: EventMark | None = None
    last_event: EventMark | None = None


@dataclass(slots=True)
class PendingGap:
    """A gap record (its JSON form), kept until Kafka has it (`published`) and an operator acknowledged it."""

    record: dict[str, Any]
    published: bool = False
    acknowledged: bool = False

    @property
    def gap_id(self) -> str:
        return str(self.record["gap_id"])


@dataclass(slots=True)
class SegmentLedger:
    """The agent's memory of cdc_raw (see the module docstring); `dirty` until `flush` wrote it."""

    path: Path
    highest_seen: int | None = None
    segments: dict[int, SegmentEntry] = field(default_factory=dict)
    released: deque[int] = field(default_factory=lambda: deque(maxlen=RELEASED_KEPT))
    reported_orphans: set[int] = field(default_factory=set)
    """Ids of `_cdc.idx` files without their segment that a gap record already names."""
    last_released_event: EventMark | None = None
    """The last event read from the newest segment the agent released: where a gap's window starts when
    nothing was read from the first lost segment."""
    gaps: list[PendingGap] = field(default_factory=list)
    dirty: bool = False

    @classmethod
    def load(cls, path: Path, *, offsets: dict[int, int]) -> SegmentLedger:
        """The ledger in `path`; without one, what offsets.json tells (an agent that ran before the ledger
        existed): its segments are known, and one with an offset above 0 held CDC data."""
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            ledger = cls(path)
            for sid, offset in offsets.items():
                ledger.segments[sid] = SegmentEntry(
                    sid,
                    0.0,
                    cdc_index_offset=offset or None,
                    read_position=offset,
                    acknowledged_position=offset,
                )
            ledger.highest_seen = max(offsets, default=None)
            ledger.dirty = bool(offsets)
            return ledger
        except (OSError, ValueError) as exc:
            raise LedgerError(
                f"cdc_raw ledger {path} is unreadable ({exc}); move it away to start without the memory of "
                "what cdc_raw held (segments deleted meanwhile by Cassandra would go unnoticed)"
            ) from exc
        if not isinstance(data, dict) or data.get("format") != _FORMAT:
            raise LedgerError(f"cdc_raw ledger {path} is not in format {_FORMAT}")
        try:
            return cls(
                path,
                highest_seen=data["highest_seen"],
                segments={int(k): _entry(v) for k, v in data["segments"].items()},
                released=deque(data["released"], maxlen=RELEASED_KEPT),
                reported_orphans=set(data["reported_orphans"]),
                last_released_event=_mark(data["last_released_event"]),
                gaps=[PendingGap(g["record"], g["published"], g["acknowledged"]) for g in data["gaps"]],
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise LedgerError(f"cdc_raw ledger {path} is malformed: {exc!r}") from exc

    def flush(self) -> bool:
        """Write the ledger if it changed; True if a write happened."""
        if not self.dirty:
            return False
        payload = {
            "format": _FORMAT,
            "highest_seen": self.highest_seen,
            "segments": {str(sid): asdict(e) for sid, e in sorted(self.segments.items())},
            "released": list(self.released),
            "reported_orphans": sorted(self.reported_orphans),
            "last_released_event": None
            if self.last_released_event is None
            else asdict(self.last_released_event),
            "gaps": [
                {"record": g.record, "published": g.published, "acknowledged": g.acknowledged}
                for g in self.gaps
            ],
        }
        write_durably(self.path, json.dumps(payload))
        self.dirty = False
        return True


def _mark(data: dict[str, Any] | None) -> EventMark | None:
    return None if data is None else EventMark(**data)


def _entry(data: dict[str, Any]) -> SegmentEntry:
    fields = dict(data)
    fields["first_event"] = _mark(fields.get("first_event"))
    fields["last_event"] = _mark(fields.get("last_event"))
    return SegmentEntry(**fields)
