"""Finding segments Cassandra deleted from cdc_raw before the agent read them, on real folders.

Each test lays out a cdc_raw folder the way Cassandra 5.0 does (a hard link per segment, a `_cdc.idx` only
for a segment holding CDC data), lets a detector look at it, changes the folder as Cassandra or the agent
would, and looks again, often with a new detector loaded from the saved ledger, as after a restart.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.cdc_raw import list_cdc_segments, list_orphan_indexes
from agents.errors import LedgerError
from agents.gap_detector import GapDetector
from agents.segment_gaps import Finding, gap_record, set_first_event
from agents.segment_ledger import EventMark, SegmentLedger
from schemas.raw_event import raw_event_write_time


class Folder:
    """A cdc_raw folder and the state folder of one agent, with a detector that survives "restarts"."""

    def __init__(self, tmp_path: Path) -> None:
        self.cdc_raw = tmp_path / "cdc_raw"
        self.cdc_raw.mkdir()
        self.ledger_path = tmp_path / "state" / "cdc_raw_ledger.json"
        self.detector = self.restart()

    def restart(self, offsets: dict[int, int] | None = None) -> GapDetector:
        """A new detector from what the last one saved (the agent stopped and started again)."""
        self.detector = GapDetector(SegmentLedger.load(self.ledger_path, offsets=offsets or {}))
        return self.detector

    def segment(self, sid: int, index: str | None = None) -> None:
        (self.cdc_raw / f"CommitLog-7-{sid}.log").write_bytes(b"\0" * 64)
        if index is not None:
            self.index(sid, index)

    def index(self, sid: int, text: str) -> None:
        (self.cdc_raw / f"CommitLog-7-{sid}_cdc.idx").write_text(text)

    def delete(self, sid: int, *, index_too: bool = True) -> None:
        (self.cdc_raw / f"CommitLog-7-{sid}.log").unlink()
        if index_too:
            (self.cdc_raw / f"CommitLog-7-{sid}_cdc.idx").unlink(missing_ok=True)

    def look(self, now: float = 1000.0) -> Finding | None:
        segments = list_cdc_segments(self.cdc_raw)
        finding = self.detector.observe(segments, list_orphan_indexes(self.cdc_raw, segments), now=now)
        self.detector.ledger.flush()
        return finding

    def read(self, sid: int, position: int, *, acknowledged: int | None = None, to_end: bool = False,
             last: EventMark | None = None) -> None:  # fmt: skip
        self.detector.record_reading(
            sid,
            read_position=position,
            acknowledged_position=position if acknowledged is None else acknowledged,
            read_to_end=to_end,
            first_event=None,
            last_event=last,
        )


@pytest.fixture
def folder(tmp_path: Path) -> Folder:
    return Folder(tmp_path)


def test_segments_coming_and_going_as_cassandra_and_the_agent_make_them_are_no_gap(folder: Folder) -> None:
    folder.segment(10, "100")
    folder.segment(11)  # the spare: linked at creation, no CDC data yet
    assert folder.look() is None
    folder.index(10, "900\nCOMPLETED")
    folder.read(10, 900, to_end=True)
    folder.detector.released(10)  # the agent releases 10 ...
    folder.delete(10)
    folder.delete(11)  # ... and Cassandra discards 11, which held no CDC data
    folder.segment(12, "40")
    folder.segment(13)
    assert folder.look() is None
    folder.restart()
    folder.segment(14)
    assert folder.look() is None, "an agent restarted over the same folder reports a gap"


def test_a_segment_deleted_before_it_was_read_to_its_end_is_lost_with_its_window(folder: Folder) -> None:
    folder.segment(10, "500")
    folder.segment(11)
    assert folder.look(now=1000.0) is None
    last = EventMark(10, 200, 1_700_000_000_000_000)
    folder.read(10, 200, acknowledged=150, last=last)
    folder.look()
    # the agent stops; Cassandra writes on, then deletes the oldest segments to stay under cdc_total_space
    folder.restart()
    folder.delete(10)
    folder.delete(11)
    folder.segment(15, "40")
    folder.segment(16)
    finding = folder.look(now=2000.0)

    assert finding is not None and finding.certain
    [lost] = finding.lost
    assert (lost.segment_id, lost.how, lost.read_position, lost.acknowledged_position) == (
        10,
        "deleted_unread",
        200,
        150,
    )
    assert (lost.cdc_index_offset, lost.completed, lost.last_event) == (500, False, last)
    # 11 had no index when last seen, 12-14 were never seen: each held no CDC data or was deleted unread
    assert finding.unaccounted == [(11, 14)]
    assert finding.last_read_before == last
    assert finding.first_after is not None and finding.first_after.segment_id == 15

    record = gap_record(finding, cluster="c1", node="n1", cdc_raw=str(folder.cdc_raw),
                        tables=["shop.orders", "shop.carts"], detected_at=2000.0)  # fmt: skip
    first_after = EventMark(15, 40, 1_700_000_000_500_000)
    set_first_event(record, first_after)
    assert record["gap_id"] == "n1:10-14@2000000" and record["certain"] is True
    assert record["lost_segments"][0]["file"] == "CommitLog-7-10.log"
    assert record["lost_segments"][0]["first_seen"] == "1970-01-01T00:16:40.000Z"
    assert record["unaccounted_segment_ids"] == [[11, 14]] and record["unaccounted_segment_count"] == 4
    assert record["window"]["last_read_before"]["write_time"] == "2023-11-14T22:13:20.000Z"
    assert record["window"]["first_after"]["first_event"]["write_time_us"] == first_after.write_time_us
    assert record["tables"] == ["shop.carts", "shop.orders"]
    assert record["recovery"] == "cdc pipeline bootstrap --config FILE --tables shop.carts,shop.orders"

    folder.restart()
    assert folder.look() is None, "the same gap was reported twice"


def test_ids_never_seen_are_no_gap_while_an_older_known_segment_is_still_there(folder: Folder) -> None:
    """Cassandra deletes the oldest segments first: if 10 is still there, nothing after it was deleted."""
    folder.segment(10, "100")
    folder.segment(11)
    folder.look()
    folder.read(10, 100)
    folder.look()
    folder.restart()
    folder.delete(11)  # discarded: no CDC data
    folder.segment(20, "10")  # 12-19 came and went while the agent was away
    assert folder.look() is None


def test_ids_never_seen_with_nothing_older_left_are_a_possible_gap(folder: Folder) -> None:
    folder.segment(11)  # the agent knew only a segment without CDC data
    folder.look()
    folder.restart()
    folder.delete(11)
    folder.segment(20, "10")
    finding = folder.look()
    assert finding is not None and not finding.certain and finding.lost == []
    assert finding.unaccounted == [(11, 19)]


def test_while_running_an_id_jump_is_no_gap(folder: Folder) -> None:
    """A running agent sees every link Cassandra makes: ids it did not see (a restart of the node starts
    from its clock in ms) never held CDC data."""
    folder.segment(11)
    folder.look()
    folder.delete(11)
    folder.segment(1_800_000_000_001, "0")
    assert folder.look() is None


def test_an_index_left_without_its_segment_is_a_lost_segment(folder: Folder) -> None:
    folder.segment(20, "100")
    folder.segment(21, "50")
    folder.look()
    folder.read(20, 100)
    folder.look()
    # Cassandra deleted the link and index of 20, then its last sync wrote the index again
    folder.delete(20)
    folder.index(20, "300\nCOMPLETED")
    # and an index of a segment the agent never saw: a segment linked, filled and deleted between two looks
    folder.index(19, "70\nCOMPLETED")
    finding = folder.look()
    assert finding is not None and finding.certain
    lost = {s.segment_id: s for s in finding.lost}
    assert (lost[20].how, lost[20].cdc_index_offset, lost[20].completed, lost[20].read_position) == (
        "deleted_unread", 300, True, 100,
    )  # fmt: skip
    assert (lost[19].how, lost[19].cdc_index_offset) == ("index_without_segment", 70)
    assert finding.first_after is not None and finding.first_after.segment_id == 21
    assert folder.look() is None, "an index left behind was reported again"
    folder.restart()
    assert folder.look() is None, "an index left behind was reported again after a restart"


def test_leftovers_of_segments_the_agent_released_or_read_to_the_end_are_no_gap(folder: Folder) -> None:
    folder.segment(30, "100\nCOMPLETED")
    folder.segment(31, "200\nCOMPLETED")
    folder.segment(32, "10")
    folder.look()
    folder.read(30, 100, to_end=True)
    folder.read(31, 200, to_end=True)
    folder.detector.released(30)
    folder.delete(30, index_too=False)  # the agent's unlink of the index failed
    folder.delete(31)  # deleted by Cassandra, but the agent had read it all
    assert folder.look() is None


def test_an_unreadable_index_counts_as_cdc_data(folder: Folder) -> None:
    folder.segment(40, "garbage Cassandra never writes")
    folder.segment(41)
    folder.look()
    folder.delete(40)
    finding = folder.look()
    assert finding is not None and [s.segment_id for s in finding.lost] == [40]


def test_gaps_stay_until_published_and_acknowledged_across_restarts(folder: Folder) -> None:
    gap = folder.detector.record({"gap_id": "n1:1-2@5", "window": {"first_after": None}})
    folder.detector.ledger.flush()
    detector = folder.restart()
    assert [g.gap_id for g in detector.unacknowledged] == [gap.gap_id]
    assert [g.gap_id for g in detector.unpublished()] == [gap.gap_id]
    assert detector.acknowledge() == [gap.gap_id]
    assert detector.unacknowledged == []
    assert [g.gap_id for g in detector.unpublished()] == [gap.gap_id], (
        "an acknowledged gap must still be sent"
    )
    detector.ledger.flush()
    detector = folder.restart()
    assert detector.unacknowledged == [] and len(detector.unpublished()) == 1
    detector.published(gap.gap_id)
    assert detector.ledger.gaps == []


def test_an_agent_that_ran_before_the_ledger_starts_from_its_offsets(folder: Folder) -> None:
    """offsets.json of an older agent: its segments are known, those with an offset held CDC data."""
    folder.restart(offsets={50: 120, 51: 0})
    folder.segment(55, "10")
    finding = folder.look()
    assert finding is not None and [(s.segment_id, s.acknowledged_position) for s in finding.lost] == [
        (50, 120)
    ]
    assert finding.unaccounted == [(51, 54)]


def test_an_unreadable_ledger_names_its_file(folder: Folder) -> None:
    folder.ledger_path.parent.mkdir(parents=True, exist_ok=True)
    folder.ledger_path.write_text("{not json")
    with pytest.raises(LedgerError, match=r"cdc_raw_ledger\.json"):
        folder.restart()


def test_write_time_of_a_raw_event_is_its_largest_timestamp() -> None:
    event = {
        "partition_deletion": {"timestamp": 5, "local_deletion_time": 0},
        "static_row": None,
        "rows": [
            {
                "deletion": None,
                "liveness": {"timestamp": 7},
                "complex_deletions": [],
                "cells": [{"timestamp": 9}, {"timestamp": 3}],
            },
        ],
        "range_tombstones": [{"deletion": {"timestamp": 8}, "start_deletion": {"timestamp": 11}}],
    }
    assert raw_event_write_time(event) == 11
