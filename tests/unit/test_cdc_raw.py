"""Listing cdc_raw: segments in id order with their index, and a bad index never stops the listing."""

from __future__ import annotations

from pathlib import Path

from agents.cdc_raw import list_cdc_segments


def test_unreadable_index_is_reported_not_raised(tmp_path: Path) -> None:
    (tmp_path / "CommitLog-7-1.log").write_bytes(b"\0" * 64)
    (tmp_path / "CommitLog-7-1_cdc.idx").write_text("garbage that Cassandra never writes")
    (tmp_path / "CommitLog-7-2.log").write_bytes(b"\0" * 64)
    (tmp_path / "CommitLog-7-2_cdc.idx").write_text("12")
    first, second = list_cdc_segments(tmp_path)
    assert first.index is None and first.index_error and "garbage" in first.index_error
    assert second.index is not None and second.index.offset == 12 and second.index_error is None
