"""Unreadable segments are copied aside with a report that names segment, offset and reason."""

from __future__ import annotations

import json
from pathlib import Path

from agents.quarantine import Problem, Quarantine


def test_first_problem_copies_segment_and_index(tmp_path: Path) -> None:
    cdc_raw = tmp_path / "cdc_raw"
    cdc_raw.mkdir()
    segment = cdc_raw / "CommitLog-7-123.log"
    segment.write_bytes(b"segment bytes")
    (cdc_raw / "CommitLog-7-123_cdc.idx").write_text("13\nCOMPLETED")
    quarantine = Quarantine(tmp_path / "quarantine")
    problem = Problem(segment.name, 40, 40, "entry", "entry body CRC mismatch")
    assert quarantine.record(segment, [problem]) is True
    assert (tmp_path / "quarantine" / segment.name).read_bytes() == b"segment bytes"
    assert (tmp_path / "quarantine" / "CommitLog-7-123_cdc.idx").read_text() == "13\nCOMPLETED"
    report = json.loads(quarantine.report_path(segment).read_text())
    assert report["segment"] == segment.name
    assert report["problems"] == [
        {
            "segment": segment.name,
            "offset": 40,
            "position": 40,
            "scope": "entry",
            "reason": "entry body CRC mismatch",
        }
    ]


def test_later_problems_are_appended_once_and_the_copy_refreshed(tmp_path: Path) -> None:
    segment = tmp_path / "CommitLog-7-9.log"
    segment.write_bytes(b"v1")
    quarantine = Quarantine(tmp_path / "q")
    first = Problem(segment.name, 10, 10, "entry", "bad CRC")
    assert quarantine.record(segment, [first])
    segment.write_bytes(b"v2 grown")
    second = Problem(segment.name, 90, 90, "section", "bad marker")
    assert quarantine.record(segment, [first, second]) is False, "already quarantined"
    report = json.loads(quarantine.report_path(segment).read_text())
    assert [p["offset"] for p in report["problems"]] == [10, 90]
    assert (tmp_path / "q" / segment.name).read_bytes() == b"v2 grown"
    assert quarantine.record(segment, []) is False
