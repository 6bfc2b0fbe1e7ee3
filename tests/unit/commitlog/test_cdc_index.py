"""The ``_cdc.idx`` file: what Cassandra writes, what a reader may catch mid-write, and following it."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.commitlog.cdc_index import CdcIndex, format_cdc_index, parse_cdc_index, read_cdc_index
from agents.commitlog.compression import Codec
from agents.commitlog.descriptor import parse_index_name, parse_segment_name
from agents.commitlog.errors import SegmentFormatError
from agents.commitlog.segment_reader import LogEntry, StopReason, read_segment
from tests.unit.commitlog.test_segment_reader import bodies, build_segment, reference_sections, segments


def test_what_cassandra_writes() -> None:
    assert parse_cdc_index("75011") == CdcIndex(offset=75011, completed=False)
    assert parse_cdc_index(b"75011\nCOMPLETED") == CdcIndex(offset=75011, completed=True)
    assert format_cdc_index(75011) == "75011"
    assert format_cdc_index(75011, completed=True) == "75011\nCOMPLETED"
    for offset, completed in ((0, False), (20, True), (2**31 - 1, False)):
        assert parse_cdc_index(format_cdc_index(offset, completed)) == CdcIndex(offset, completed)


def test_tolerated_variants() -> None:
    # Never written by Cassandra, but harmless: a trailing newline, CRLF, surrounding blanks.
    assert parse_cdc_index("123\n") == CdcIndex(123, False)
    assert parse_cdc_index("123\r\nCOMPLETED\r\n") == CdcIndex(123, True)
    assert parse_cdc_index("  123 \nCOMPLETED  ") == CdcIndex(123, True)


def test_empty_or_half_written_means_retry() -> None:
    assert parse_cdc_index("") is None
    assert parse_cdc_index(b"") is None
    assert parse_cdc_index(" \n") is None
    full = format_cdc_index(4096, completed=True)
    for cut in range(len(full) + 1):
        parsed = parse_cdc_index(full[:cut])
        prefix = full[:cut]
        if prefix.isdigit() or (prefix[:-1].isdigit() and prefix.endswith("\n")):
            # A prefix that is all digits reads as a smaller (still safe) durable offset.
            assert parsed == CdcIndex(int(prefix.strip()), False)
        elif cut == len(full):
            assert parsed == CdcIndex(4096, True)
        else:
            assert parsed is None, prefix


@pytest.mark.parametrize(
    "garbage",
    [
        "abc",
        "-5",
        "12a",
        "12\nDONE",
        "12\nCOMPLETEDX",
        "12\n\nCOMPLETED",
        "COMPLETED",
        "1.5",
        "12\nCOMPLETED\n7",
    ],
)
def test_garbage_is_a_format_error_naming_the_file(garbage: str) -> None:
    with pytest.raises(SegmentFormatError) as info:
        parse_cdc_index(garbage, name="CommitLog-7-1_cdc.idx")
    assert info.value.segment == "CommitLog-7-1_cdc.idx"


def test_non_ascii_bytes_are_a_format_error() -> None:
    with pytest.raises(SegmentFormatError):
        parse_cdc_index(b"12\xff", name="x")
    with pytest.raises(SegmentFormatError):
        parse_cdc_index("١٢٣")  # Arabic-Indic digits are not what Java writes


def test_read_limit() -> None:
    # A completed segment is read to its end: after replay Cassandra writes the *file* length, which is
    # less than the logical end of a compressed segment.
    assert CdcIndex(100, completed=False).read_limit == 100
    assert CdcIndex(100, completed=True).read_limit is None


def test_read_cdc_index_file(tmp_path: Path) -> None:
    path = tmp_path / "CommitLog-7-1699285478684_cdc.idx"
    assert read_cdc_index(path) is None  # not there (yet, or any more): retry
    path.write_text("")
    assert read_cdc_index(path) is None
    path.write_text("75011")
    assert read_cdc_index(path) == CdcIndex(75011, False)
    path.write_text("75011\nCOMPLETED")
    assert read_cdc_index(str(path)) == CdcIndex(75011, True)
    path.write_text("nonsense")
    with pytest.raises(SegmentFormatError) as info:
        read_cdc_index(path)
    assert info.value.segment == path.name
    path.write_bytes(b"1" * 10_000)
    with pytest.raises(SegmentFormatError):
        read_cdc_index(path)


def test_index_name_matches_its_segment() -> None:
    segment = parse_segment_name("CommitLog-7-1699285478684.log")
    assert parse_index_name(segment.index_file) == segment
    assert parse_index_name(segment.index_file).segment_file == "CommitLog-7-1699285478684.log"


def _follow(data: bytes, name: str, idx_texts: list[str]) -> tuple[list[LogEntry], bool]:
    """Do what the agent does: on each idx state, read [resume, read_limit) with the idx's completion."""
    entries: list[LogEntry] = []
    start, finished = 0, False
    for text in idx_texts:
        index = parse_cdc_index(text)
        if index is None:
            continue
        result = read_segment(data, start=start, limit=index.read_limit, completed=index.completed, name=name)
        assert result.damage == []
        entries += result.entries
        start, finished = result.resume_position, result.finished
    return entries, finished


def test_following_the_real_4_0_segment_through_its_section_ends(legacy_commitlog_dir: Path) -> None:
    """For an mmap segment each sync's idx offset is a section end (the next marker's offset)."""
    path = segments(legacy_commitlog_dir / "4.0.11-encrypted")[0]
    data = path.read_bytes()
    full = read_segment(path, completed=True)
    ends = [s.position + 8 + len(s.payload) for s in reference_sections(data)]
    texts = [
        "",
        *(format_cdc_index(end) for end in ends[:-1]),
        "",
        format_cdc_index(ends[-1], completed=True),
    ]
    entries, finished = _follow(data, path.name, texts)
    assert finished
    assert [(e.position, e.data) for e in entries] == [(e.position, e.data) for e in full.entries]


@pytest.mark.parametrize("codec", [None, Codec.SNAPPY, Codec.DEFLATE])
def test_following_a_written_segment_including_replayed_file_length(codec: Codec | None) -> None:
    mutations = bodies(50, seed=21)
    built = build_segment(99, [mutations[i : i + 6] for i in range(0, 50, 6)], codec=codec)
    texts = [format_cdc_index(end) for end in built.section_ends[:4]]
    # After a crash, replay relinks the segment with "<file length>\nCOMPLETED"; for a compressed
    # segment the file length is below the logical end, which must not cut the read short.
    texts.append(format_cdc_index(len(built.data), completed=True))
    entries, finished = _follow(built.data, built.name, texts)
    assert finished and [e.data for e in entries] == mutations


def test_idx_offset_lagging_the_markers_stops_at_the_offset() -> None:
    # Markers are refreshed without an idx update in periodic mode: data past the offset is not read.
    built = build_segment(3, [bodies(4, 1), bodies(4, 2), bodies(4, 3)], mmap_size=1 << 13)
    result = read_segment(built.data, limit=built.section_ends[1], name=built.name)
    assert result.stop is StopReason.LIMIT and len(result.entries) == 8
