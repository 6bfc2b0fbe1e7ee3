"""The gap record: what the agent knows about CDC data Cassandra deleted from cdc_raw before it was read.

One JSON record per gap goes to `<kafka.raw_topic>.gaps`, keyed by the node name, so that whoever repairs
the lake learns which node lost what, and when. A record says only what is known:

- `lost_segments`: segments known to have held CDC data (Cassandra had written their `_cdc.idx`) whose
  hard link disappeared before the agent read them to their end, with how far the agent read
  (`read_position`) and what Kafka acknowledged (`acknowledged_position`: the loss starts there at the
  latest), the durable offset Cassandra last reported (`cdc_index_offset`), and the files' mtimes.
- `unaccounted_segment_ids`: inclusive id ranges of segments the agent never saw with data (created and
  deleted while it was away). Each either held no CDC data (Cassandra then removes it itself) or was deleted
  unread; which, nobody can tell any more. Across a restart of Cassandra a range also spans ids never
  assigned (a node numbers its segments from its clock in ms at start).
- `window`: the last event the agent read before the gap and the first segment after it, with the write
  time of its first event when the agent has read one by the time the record is sent (null otherwise):
  the lost writes were logged between the two.
- `tables`: every CDC table the agent captures on the node. Which of them the lost segments held cannot be
  known, so all of them are named, and `recovery` is the bootstrap of those tables.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from agents.segment_ledger import EventMark

GAP_FORMAT = 1
TABLES_NOTE = (
    "every CDC table the agent captures on this node: which of them the lost segments held cannot be known"
)


def gap_topic(raw_topic: str) -> str:
    """The topic of the gap records of the agents publishing to `raw_topic`."""
    return f"{raw_topic}.gaps"


@dataclass(slots=True, frozen=True)
class LostSegment:
    """A segment known to have held CDC data that left cdc_raw before the agent read it to its end."""

    segment_id: int
    version: int
    """Descriptor version in the file name (0: unknown)."""
    how: str
    """`deleted_unread` (its hard link and index disappeared) or `index_without_segment` (only its
    `_cdc.idx` is left: Cassandra deleted the link, then wrote the index again at a later sync)."""
    cdc_index_offset: int | None
    completed: bool
    read_position: int = 0
    acknowledged_position: int = 0
    first_seen: float | None = None
    segment_modified: float | None = None
    index_modified: float | None = None
    last_event: EventMark | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "segment_id": self.segment_id,
            "file": f"CommitLog-{self.version}-{self.segment_id}.log" if self.version else None,
            "how": self.how,
            "cdc_index_offset": self.cdc_index_offset,
            "completed": self.completed,
            "read_position": self.read_position,
            "acknowledged_position": self.acknowledged_position,
            "first_seen": iso_time(self.first_seen),
            "segment_modified": iso_time(self.segment_modified),
            "index_modified": iso_time(self.index_modified),
            "last_event": mark_json(self.last_event),
        }


@dataclass(slots=True, frozen=True)
class FirstAfter:
    """The first segment still in cdc_raw above the gap."""

    segment_id: int
    first_seen: float | None
    segment_modified: float | None


@dataclass(slots=True)
class Finding:
    """What one look at cdc_raw found missing."""

    lost: list[LostSegment] = field(default_factory=list)
    unaccounted: list[tuple[int, int]] = field(default_factory=list)
    """Inclusive ranges of ids that may have been deleted unread (see the module docstring)."""
    last_read_before: EventMark | None = None
    first_after: FirstAfter | None = None

    @property
    def certain(self) -> bool:
        """Whether CDC data was certainly lost (else only ids are unaccounted for)."""
        return bool(self.lost)

    @property
    def unaccounted_count(self) -> int:
        return sum(hi - lo + 1 for lo, hi in self.unaccounted)

    @property
    def lowest_id(self) -> int:
        return min([s.segment_id for s in self.lost] + [lo for lo, _ in self.unaccounted])

    @property
    def highest_id(self) -> int:
        return max([s.segment_id for s in self.lost] + [hi for _, hi in self.unaccounted])

    def describe(self) -> str:
        """One line for the log: the segments, positions and ranges."""
        parts = [
            f"segment {s.segment_id} ({s.how}: read to {s.read_position}, acknowledged to "
            f"{s.acknowledged_position}, Cassandra's _cdc.idx said {s.cdc_index_offset}"
            f"{' COMPLETED' if s.completed else ''})"
            for s in self.lost
        ]
        if self.unaccounted:
            ranges = ", ".join(f"{lo}" if lo == hi else f"{lo}..{hi}" for lo, hi in self.unaccounted)
            parts.append(f"{self.unaccounted_count} segment ids never seen with data ({ranges})")
        return "; ".join(parts)


def gap_record(
    finding: Finding,
    *,
    cluster: str,
    node: str,
    cdc_raw: str,
    tables: list[str],
    detected_at: float,
) -> dict[str, Any]:
    """The JSON form of a gap; `window.first_after.first_event` is filled in when the record is sent."""
    first_after = finding.first_after
    table_list = sorted(tables)
    return {
        "format": GAP_FORMAT,
        "gap_id": f"{node}:{finding.lowest_id}-{finding.highest_id}@{int(detected_at * 1000)}",
        "cluster": cluster,
        "node": node,
        "cdc_raw_directory": cdc_raw,
        "detected_at": iso_time(detected_at),
        "certain": finding.certain,
        "lost_segments": [s.to_json() for s in finding.lost],
        "unaccounted_segment_ids": [[lo, hi] for lo, hi in finding.unaccounted],
        "unaccounted_segment_count": finding.unaccounted_count,
        "window": {
            "last_read_before": mark_json(finding.last_read_before),
            "first_after": None
            if first_after is None
            else {
                "segment_id": first_after.segment_id,
                "first_seen": iso_time(first_after.first_seen),
                "segment_modified": iso_time(first_after.segment_modified),
                "first_event": None,
            },
        },
        "tables": table_list,
        "tables_note": TABLES_NOTE,
        "recovery": f"cdc pipeline bootstrap --config FILE --tables {','.join(table_list)}"
        if table_list
        else "no CDC table is captured on this node: nothing to bootstrap",
    }


def set_first_event(record: dict[str, Any], mark: EventMark | None) -> None:
    """Put the first event read after the gap into a record's window (when there is one)."""
    first_after = record["window"]["first_after"]
    if first_after is not None and first_after["first_event"] is None and mark is not None:
        first_after["first_event"] = mark_json(mark)


def mark_json(mark: EventMark | None) -> dict[str, Any] | None:
    if mark is None:
        return None
    return {
        "segment_id": mark.segment_id,
        "position": mark.position,
        "write_time_us": mark.write_time_us,
        "write_time": iso_time(mark.write_time_us / 1e6),
    }


def iso_time(seconds: float | None) -> str | None:
    """UTC, ms precision, e.g. 2025-01-31T12:00:00.123Z."""
    if seconds is None:
        return None
    return (
        dt.datetime.fromtimestamp(seconds, dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    )
