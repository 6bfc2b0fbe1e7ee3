"""Segment framing on real Cassandra segments and on segments written here from the format reference.

Numbers asserted come from the fixtures' hash.txt or from the format reference (§11.4); everything else
is checked against an independent, deliberately naive walk of the same bytes (``reference_entries``).
"""

from __future__ import annotations

import json
import random
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

import cramjam
import lz4.block
import pytest
import zstandard

from agents.commitlog.compression import Codec, codec_for_class, compress, compressor_class, decompress
from agents.commitlog.descriptor import (
    encode_header,
    parse_descriptor,
    parse_index_name,
    parse_segment_name,
    read_descriptor,
)
from agents.commitlog.errors import (
    CommitLogError,
    CorruptEntryError,
    CorruptSectionError,
    SegmentFormatError,
    UnsupportedSegmentError,
)
from agents.commitlog.segment_reader import (
    DamageScope,
    LogEntry,
    SegmentReadResult,
    SegmentScan,
    StopReason,
    read_segment,
)

# Entry counts the format reference (§11.4) found in each fixture folder, all files together.
DOC_ENTRY_COUNTS = {
    "2.2-lz4": 6134,
    "2.2-snappy": 6133,
    "3.0.13-encrypted": 1480,
    "3.0.29-encrypted": 176,
    "4.0.11-encrypted": 358,
}
CLEAN_FOLDERS = sorted(DOC_ENTRY_COUNTS)
DAMAGED_FOLDERS = ["2.2-lz4-bitrot", "2.2-lz4-bitrot2", "2.2-lz4-truncated"]
ENCRYPTED_FOLDER = "3.4-encrypted"

# --------------------------------------------------------------------------------------------------
# Helpers shared with test_segment_fuzz.py
# --------------------------------------------------------------------------------------------------


def segments(folder: Path) -> list[Path]:
    return sorted(folder.glob("CommitLog-*.log"), key=lambda p: parse_segment_name(p.name).segment_id)


def hash_properties(folder: Path) -> dict[str, str]:
    """hash.txt is a Java properties file: ``key=value`` lines, ``#`` comments."""
    props = {}
    for line in (folder / "hash.txt").read_text().splitlines():
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            props[key.strip()] = value.strip()
    return props


@dataclass
class RefSection:
    offset: int  # file offset of the sync marker
    position: int  # logical position of the sync marker
    payload: bytes


_REF_DECOMPRESS = {
    "LZ4Compressor": lambda raw: lz4.block.decompress(raw),
    "SnappyCompressor": lambda raw: bytes(cramjam.snappy.decompress_raw(raw)),
    "DeflateCompressor": zlib.decompress,
    "ZstdCompressor": lambda raw: zstandard.ZstdDecompressor().decompress(raw),
}


def reference_sections(data: bytes) -> list[RefSection]:
    """A naive walk straight from the reference (§3, §4), stopping at the first marker it cannot use."""
    _version, segment_id, params_length = struct.unpack_from(">iqH", data, 0)
    params = json.loads(data[14 : 14 + params_length] or b"{}")
    codec_class = params.get("compressionClass")
    id_bits = segment_id & 0xFFFFFFFFFFFFFFFF
    offset = position = 18 + params_length
    sections = []
    while offset + 8 <= len(data):
        next_offset, crc = struct.unpack_from(">iI", data, offset)
        if crc != zlib.crc32(struct.pack(">III", id_bits & 0xFFFFFFFF, id_bits >> 32, offset)):
            break
        if next_offset > len(data) or next_offset < offset + 8:
            break
        if codec_class is None:
            payload = data[offset + 8 : next_offset]
        else:
            (length,) = struct.unpack_from(">i", data, offset + 8)
            try:
                payload = _REF_DECOMPRESS[codec_class.rsplit(".", 1)[-1]](data[offset + 12 : next_offset])
            except Exception:
                payload = None
            if payload is None or len(payload) != length:
                payload = b"\xff" * length  # undecodable: keep positions, yield no entries
        sections.append(RefSection(offset, position, payload))
        position += 8 + len(payload)
        offset = next_offset
    return sections


def reference_entries(data: bytes) -> list[tuple[int, int, bytes]]:
    """(position, end, mutation) of every entry whose size and body CRCs hold (§5)."""
    out = []
    for section in reference_sections(data):
        payload, base, pos = section.payload, section.position + 8, 0
        while pos + 8 <= len(payload):
            size, size_crc = struct.unpack_from(">iI", payload, pos)
            if size < 10 or zlib.crc32(payload[pos : pos + 4]) != size_crc or pos + 12 + size > len(payload):
                break
            body = payload[pos + 8 : pos + 8 + size]
            if (
                zlib.crc32(payload[pos : pos + 4] + body)
                == struct.unpack_from(">I", payload, pos + 8 + size)[0]
            ):
                out.append((base + pos, base + pos + 12 + size, body))
            pos += 12 + size
    return out


def triples(entries: list[LogEntry]) -> list[tuple[int, int, bytes]]:
    return [(e.position, e.end, e.data) for e in entries]


def frame_entry(body: bytes) -> bytes:
    """``[len][crc(len)][mutation][crc(len ++ mutation)]`` (§5)."""
    size = struct.pack(">i", len(body))
    return size + struct.pack(">I", zlib.crc32(size)) + body + struct.pack(">I", zlib.crc32(size + body))


@dataclass
class BuiltSegment:
    name: str
    data: bytes
    header_end: int
    marker_offsets: list[int]  # file offset of each section's sync marker
    section_ends: list[int]  # logical end of each section: what the _cdc.idx offset says after that sync
    entry_positions: list[list[int]]  # logical position of each entry, per section
    file_ends: list[int]  # file length once each section has been written


def build_segment(
    segment_id: int,
    sections: list[list[bytes] | bytes],
    *,
    version: int = 7,
    codec: Codec | None = None,
    mmap_size: int | None = None,
) -> BuiltSegment:
    """Write a segment as Cassandra does (§10). A section is a list of mutation bodies, or raw payload."""
    params = (
        {} if codec is None else {"compressionClass": compressor_class(codec), "compressionParameters": None}
    )
    out = bytearray(encode_header(version, segment_id, params))
    header_end = len(out)
    id_crc = zlib.crc32(struct.pack(">II", segment_id & 0xFFFFFFFF, segment_id >> 32))
    position = header_end
    built = BuiltSegment(f"CommitLog-{version}-{segment_id}.log", b"", header_end, [], [], [], [])
    for section in sections:
        payload = section if isinstance(section, bytes) else b"".join(frame_entry(b) for b in section)
        positions, pos = [], position + 8
        if not isinstance(section, bytes):
            for body in section:
                positions.append(pos)
                pos += 12 + len(body)
        marker = len(out)
        crc = zlib.crc32(struct.pack(">I", marker), id_crc)
        if codec is None:
            out += struct.pack(">iI", marker + 8 + len(payload), crc) + payload
        else:
            data = compress(codec, payload)
            out += struct.pack(">iIi", marker + 12 + len(data), crc, len(payload)) + data
        position += 8 + len(payload)
        built.marker_offsets.append(marker)
        built.section_ends.append(position)
        built.entry_positions.append(positions)
        built.file_ends.append(len(out))
    if codec is None:
        out += bytes(8)  # the zero marker the writer leaves at the end of the last section
        if mmap_size is not None:
            out += bytes(max(0, mmap_size - len(out)))
    built.data = bytes(out)
    return built


def bodies(count: int, seed: int, min_size: int = 10, max_size: int = 300) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(rng.randint(min_size, max_size)) for _ in range(count)]


def read_in_increments(
    data: bytes, name: str, cuts: list[int], *, final_completed: bool = True
) -> tuple[list[LogEntry], list[tuple[int, int, DamageScope]], list[SegmentReadResult]]:
    """Read ``data`` as a CDC agent would: limit = each cut (not completed), then to the end."""
    entries: list[LogEntry] = []
    damage: list[tuple[int, int, DamageScope]] = []
    results = []
    start = 0
    for cut in [*sorted(cuts), None]:
        completed = final_completed if cut is None else False
        result = read_segment(data, start=start, limit=cut, completed=completed, name=name)
        for entry in result.entries:
            assert entry.position >= start, "an entry before start was returned"
            if cut is not None:
                assert entry.end <= cut, "an entry past the limit was returned"
        entries += result.entries
        damage += [(d.offset, d.position, d.scope) for d in result.damage]
        results.append(result)
        start = result.resume_position
    return entries, damage, results


# --------------------------------------------------------------------------------------------------
# Real fixtures
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("folder", CLEAN_FOLDERS)
def test_clean_fixture_frames_completely(legacy_commitlog_dir: Path, folder: str) -> None:
    total = 0
    for path in segments(legacy_commitlog_dir / folder):
        data = path.read_bytes()
        result = read_segment(path, completed=True)
        assert result.damage == []
        assert result.stop is StopReason.END
        assert result.finished
        assert result.descriptor is not None
        assert all(e.segment_id == result.descriptor.segment_id for e in result.entries)
        assert triples(result.entries) == reference_entries(data)
        # Reading the bytes in memory is the same as reading the file.
        assert triples(read_segment(data, completed=True, name=path.name).entries) == triples(result.entries)
        if result.descriptor.compression is None:
            # Uncompressed: logical positions are file offsets, so check every entry against the disk.
            for entry in result.entries:
                raw = data[entry.position : entry.end]
                size, size_crc = struct.unpack_from(">iI", raw)
                assert size == len(entry.data) and raw[8:-4] == entry.data
                assert zlib.crc32(raw[:4]) == size_crc
                assert zlib.crc32(raw[:4] + entry.data) == struct.unpack(">I", raw[-4:])[0]
        total += len(result.entries)
    assert total == DOC_ENTRY_COUNTS[folder]
    # Each test-table mutation in these fixtures carries exactly one cell (§11.2), and the segments also
    # hold system mutations, so there are at least as many entries as hash.txt counts cells.
    assert total >= int(hash_properties(legacy_commitlog_dir / folder)["cells"])


def test_fixture_descriptors(legacy_commitlog_dir: Path) -> None:
    expected_ms = {5: None, 6: 10, 7: 12}
    for path in sorted(legacy_commitlog_dir.glob("*/CommitLog-*.log")):
        name = parse_segment_name(path.name)
        desc = read_descriptor(path, check_supported=False)
        assert desc == parse_descriptor(path.read_bytes(), segment=path.name, check_supported=False)
        assert (desc.version, desc.segment_id) == (name.version, name.segment_id)
        assert desc.messaging_version == expected_ms[desc.version]
        folder = path.parent.name
        assert desc.encrypted == (folder == ENCRYPTED_FOLDER)
        codec = {"2.2-snappy": Codec.SNAPPY}.get(folder, Codec.LZ4 if folder.startswith("2.2") else None)
        assert desc.compression == codec
        # The first sync marker sits right after the header: its CRC over (id lo, id hi, offset) holds.
        data = path.read_bytes()
        id_bits = desc.segment_id & 0xFFFFFFFFFFFFFFFF
        marker_crc = struct.unpack_from(">I", data, desc.header_end + 4)[0]
        assert marker_crc == zlib.crc32(
            struct.pack(">III", id_bits & 0xFFFFFFFF, id_bits >> 32, desc.header_end)
        )


def test_encrypted_segments_are_rejected_by_name(legacy_commitlog_dir: Path) -> None:
    paths = segments(legacy_commitlog_dir / ENCRYPTED_FOLDER)
    assert paths
    for path in paths:
        with pytest.raises(UnsupportedSegmentError) as info:
            read_segment(path, completed=True)
        assert info.value.segment == path.name
        assert path.name in str(info.value) and "encrypt" in str(info.value)


def test_bitrot_skips_one_entry_and_reports_it(legacy_commitlog_dir: Path) -> None:
    clean = read_segment(segments(legacy_commitlog_dir / "2.2-lz4")[0], completed=True)
    path = segments(legacy_commitlog_dir / "2.2-lz4-bitrot")[0]
    result = read_segment(path, completed=True)
    assert result.stop is StopReason.END
    assert len(result.damage) == 1
    damage = result.damage[0]
    assert damage.scope is DamageScope.ENTRY
    assert isinstance(damage.error, CorruptEntryError)
    assert damage.segment == path.name and damage.error.segment == path.name
    clean_by_position = {e.position: e for e in clean.entries}
    # Every entry read is byte-identical to the clean segment's entry at the same position...
    assert all(triples([clean_by_position[e.position]]) == triples([e]) for e in result.entries)
    # ...and exactly the reported one is missing, which accounts for the cell hash.txt says is lost.
    missing = sorted(set(clean_by_position) - {e.position for e in result.entries})
    assert missing == [damage.position]
    cells_lost = int(hash_properties(legacy_commitlog_dir / "2.2-lz4")["cells"]) - int(
        hash_properties(legacy_commitlog_dir / "2.2-lz4-bitrot")["cells"]
    )
    assert len(clean.entries) - len(result.entries) == cells_lost
    # The reported file offset is the marker of the compressed section holding that entry.
    containing = [s for s in reference_sections(path.read_bytes()) if s.position < damage.position]
    assert damage.offset == containing[-1].offset
    with pytest.raises(CorruptEntryError):
        read_segment(path, completed=True, strict=True)


def test_bitrot2_loses_one_section_and_reports_it(legacy_commitlog_dir: Path) -> None:
    clean = read_segment(segments(legacy_commitlog_dir / "2.2-lz4")[0], completed=True)
    path = segments(legacy_commitlog_dir / "2.2-lz4-bitrot2")[0]
    result = read_segment(path, completed=True)
    assert result.stop is StopReason.END
    assert len(result.damage) == 1
    damage = result.damage[0]
    assert damage.scope is DamageScope.SECTION
    assert isinstance(damage.error, CorruptSectionError)
    assert damage.error.offset == damage.offset and path.name in str(damage.error)
    clean_sections = reference_sections(segments(legacy_commitlog_dir / "2.2-lz4")[0].read_bytes())
    lost_section = next(s for s in clean_sections if s.offset == damage.offset)
    assert lost_section.position == damage.position
    lost_end = lost_section.position + 8 + len(lost_section.payload)
    clean_triples, read_triples = triples(clean.entries), triples(result.entries)
    assert set(read_triples) <= set(clean_triples)
    read_set = set(read_triples)
    missing = [t for t in clean_triples if t not in read_set]
    assert missing and all(damage.position < pos < lost_end for pos, _, _ in missing)
    cells_lost = int(hash_properties(legacy_commitlog_dir / "2.2-lz4")["cells"]) - int(
        hash_properties(legacy_commitlog_dir / "2.2-lz4-bitrot2")["cells"]
    )
    assert len(missing) == cells_lost
    with pytest.raises(CorruptSectionError):
        read_segment(path, completed=True, strict=True)


def test_truncated_segment(legacy_commitlog_dir: Path) -> None:
    clean = read_segment(segments(legacy_commitlog_dir / "2.2-lz4")[0], completed=True)
    path = segments(legacy_commitlog_dir / "2.2-lz4-truncated")[0]
    data = path.read_bytes()
    closed = read_segment(path, completed=True)
    # The readable part is exactly a prefix of the clean segment.
    assert triples(closed.entries) == triples(clean.entries)[: len(closed.entries)]
    cells_lost = int(hash_properties(legacy_commitlog_dir / "2.2-lz4")["cells"]) - int(
        hash_properties(legacy_commitlog_dir / "2.2-lz4-truncated")["cells"]
    )
    assert len(clean.entries) - len(closed.entries) == cells_lost
    assert closed.stop is StopReason.DAMAGED and closed.finished
    [damage] = closed.damage
    assert damage.scope is DamageScope.SEGMENT_REST and isinstance(damage.error, CorruptSectionError)
    # The reported marker really points past the end of the file.
    assert struct.unpack_from(">i", data, damage.offset)[0] > len(data)
    assert closed.resume_position == damage.position
    # While the segment is live, the same bytes are a torn tail: no error, stop there and resume later.
    live = read_segment(path, completed=False)
    assert live.damage == [] and live.stop is StopReason.TORN and not live.finished
    assert triples(live.entries) == triples(closed.entries)
    assert live.resume_position == damage.position
    # When the rest of the bytes arrive, reading on from there completes the segment exactly once.
    rest = read_segment(
        segments(legacy_commitlog_dir / "2.2-lz4")[0], start=live.resume_position, completed=True
    )
    assert triples(live.entries + rest.entries) == triples(clean.entries)


@pytest.mark.parametrize("folder", [*CLEAN_FOLDERS, "2.2-lz4-bitrot", "2.2-lz4-bitrot2"])
def test_incremental_reads_equal_a_full_read(legacy_commitlog_dir: Path, folder: str) -> None:
    rng = random.Random(folder)
    for path in segments(legacy_commitlog_dir / folder):
        data = path.read_bytes()
        full = read_segment(data, completed=True, name=path.name)
        logical_end = full.resume_position
        for _round in range(4):
            cuts = [rng.randint(0, logical_end + 16) for _ in range(rng.randint(1, 40))]
            entries, damage, results = read_in_increments(data, path.name, cuts)
            assert triples(entries) == triples(full.entries)
            assert damage == [(d.offset, d.position, d.scope) for d in full.damage]
            assert results[-1].finished


@pytest.mark.parametrize("folder", ["2.2-lz4", "4.0.11-encrypted"])
def test_section_boundaries_as_limits(legacy_commitlog_dir: Path, folder: str) -> None:
    """A live segment's idx offset is always a section end: reading to each one stops exactly there."""
    path = segments(legacy_commitlog_dir / folder)[0]
    data = path.read_bytes()
    sections = reference_sections(data)
    ends = [s.position + 8 + len(s.payload) for s in sections]
    start, seen = 0, []
    for end in ends:
        result = read_segment(path, start=start, limit=end)
        assert result.stop is StopReason.LIMIT and result.resume_position == end
        assert all(e.end <= end for e in result.entries)
        seen += result.entries
        start = result.resume_position
    assert triples(seen) == reference_entries(data)


def test_scan_can_stop_early_and_resume(legacy_commitlog_dir: Path) -> None:
    path = segments(legacy_commitlog_dir / "4.0.11-encrypted")[0]
    full = read_segment(path, completed=True)
    collected: list[LogEntry] = []
    start = 0
    for batch in (1, 7, 50, 1000):
        with SegmentScan(path, start=start) as scan:
            for entry in scan:
                collected.append(entry)
                if len(collected) % batch == 0:
                    assert scan.resume_position == entry.end
                    break
            start = scan.resume_position
    assert triples(collected) == triples(full.entries)


@pytest.mark.parametrize("folder", ["2.2-snappy", "3.0.29-encrypted"])
def test_growing_file_is_a_torn_tail_not_damage(legacy_commitlog_dir: Path, folder: str) -> None:
    path = segments(legacy_commitlog_dir / folder)[0]
    data = path.read_bytes()
    full = triples(read_segment(path, completed=True).entries)
    data_end = reference_sections(data)[-1].offset + 12  # past it, an mmap segment is only zeros
    rng = random.Random(7)
    for length in [*sorted(rng.sample(range(data_end), 20)), 0, 5, 20, 90, len(data)]:
        prefix = read_segment(data[:length], name=path.name)
        assert prefix.damage == []
        assert prefix.stop in (StopReason.TORN, StopReason.END)
        assert triples(prefix.entries) == full[: len(prefix.entries)]
        rest = read_segment(data, start=prefix.resume_position, completed=True, name=path.name)
        assert triples(prefix.entries + rest.entries) == full


def test_header_not_written_yet(legacy_commitlog_dir: Path) -> None:
    name = segments(legacy_commitlog_dir / "4.0.11-encrypted")[0].name
    for data in (b"", bytes(8), bytes(64)):
        live = read_segment(data, name=name)
        assert live.descriptor is None and live.stop is StopReason.TORN and live.entries == []
        with pytest.raises(SegmentFormatError) as info:
            read_segment(data, name=name, completed=True)
        assert info.value.segment == name


# --------------------------------------------------------------------------------------------------
# Segments written from the reference
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", [None, *Codec])
@pytest.mark.parametrize("version", [6, 7, 8])
def test_written_segments_round_trip(codec: Codec | None, version: int) -> None:
    mutations = bodies(40, seed=version)
    sections: list[list[bytes] | bytes] = [mutations[:10], [], mutations[10:11], mutations[11:], []]
    built = build_segment(
        1_700_000_000_000 + version, sections, version=version, codec=codec, mmap_size=1 << 16
    )
    result = read_segment(built.data, completed=True, name=built.name)
    assert result.damage == [] and result.stop is StopReason.END
    assert [e.data for e in result.entries] == mutations
    assert [e.position for e in result.entries] == [p for ps in built.entry_positions for p in ps]
    assert result.resume_position == built.section_ends[-1]
    assert result.descriptor is not None
    assert result.descriptor.messaging_version == {6: 10, 7: 12, 8: 13}[version]
    assert result.descriptor.compression == codec


@pytest.mark.parametrize("codec", [None, Codec.LZ4, Codec.ZSTD])
def test_live_segment_followed_through_its_cdc_index(codec: Codec | None) -> None:
    """Each sync appends a section and moves the idx offset to its end; COMPLETED ends the segment."""
    mutations = bodies(60, seed=3)
    sections: list[list[bytes] | bytes] = [mutations[i : i + 7] for i in range(0, 60, 7)]
    built = build_segment(42, sections, codec=codec)
    seen: list[LogEntry] = []
    start = 0
    for i, idx_offset in enumerate(built.section_ends):
        # What the file looks like right after sync i (plus a half-written next section for compressed).
        visible = (
            built.data[: built.file_ends[i] + 8] if codec is None else built.data[: built.file_ends[i] + 5]
        )
        result = read_segment(visible, start=start, limit=idx_offset, name=built.name)
        assert result.damage == [] and result.resume_position == idx_offset
        seen += result.entries
        start = result.resume_position
    final = read_segment(built.data, start=start, completed=True, name=built.name)
    assert final.entries == [] and final.finished
    assert [e.data for e in seen] == mutations


def test_limit_is_never_exceeded_even_when_more_is_written() -> None:
    built = build_segment(5, [bodies(5, 1), bodies(5, 2), bodies(5, 3)], mmap_size=1 << 14)
    limit = built.section_ends[0]
    result = read_segment(built.data, limit=limit, name=built.name)
    assert result.stop is StopReason.LIMIT and len(result.entries) == 5
    for cut in range(0, built.section_ends[-1] + 1, 37):
        partial = read_segment(built.data, limit=cut, name=built.name)
        assert all(e.end <= cut for e in partial.entries)
        assert partial.resume_position <= cut


def _uncompressed(sections: list[list[bytes] | bytes]) -> BuiltSegment:
    return build_segment(77, sections, mmap_size=4096)


def test_body_crc_failure_skips_only_that_entry() -> None:
    mutations = bodies(6, seed=11)
    built = _uncompressed([mutations[:3], mutations[3:]])
    data = bytearray(built.data)
    victim = built.entry_positions[0][1]
    data[victim + 8 + 3] ^= 0x40
    result = read_segment(bytes(data), completed=True, name=built.name)
    assert [e.data for e in result.entries] == mutations[:1] + mutations[2:]
    [damage] = result.damage
    assert (damage.offset, damage.position, damage.scope) == (victim, victim, DamageScope.ENTRY)
    assert damage.error.offset == victim and built.name in str(damage.error)


def test_size_crc_failure_loses_the_rest_of_the_section() -> None:
    mutations = bodies(6, seed=12)
    built = _uncompressed([mutations[:3], mutations[3:]])
    data = bytearray(built.data)
    victim = built.entry_positions[0][1]
    data[victim + 5] ^= 0x01  # the size CRC
    result = read_segment(bytes(data), completed=True, name=built.name)
    assert [e.data for e in result.entries] == mutations[:1] + mutations[3:]
    [damage] = result.damage
    assert damage.scope is DamageScope.SECTION_REST and damage.position == victim
    assert isinstance(damage.error, CorruptEntryError)


def test_too_small_size_with_valid_crc_loses_the_rest_of_the_section() -> None:
    tiny = frame_entry(b"12345")  # below the 10-byte minimum, but its CRCs are right
    built = _uncompressed([frame_entry(b"a" * 20) + tiny + frame_entry(b"b" * 20), [b"c" * 30]])
    result = read_segment(built.data, completed=True, name=built.name)
    assert [e.data for e in result.entries] == [b"a" * 20, b"c" * 30]
    assert [d.scope for d in result.damage] == [DamageScope.SECTION_REST]
    assert "invalid entry size 5" in result.damage[0].reason


def test_entry_overrunning_its_section_is_damage() -> None:
    whole = frame_entry(b"x" * 40)
    built = _uncompressed([frame_entry(b"a" * 20) + whole[:30], [b"c" * 30]])
    result = read_segment(built.data, completed=True, name=built.name)
    assert [e.data for e in result.entries] == [b"a" * 20, b"c" * 30]
    assert [d.scope for d in result.damage] == [DamageScope.SECTION_REST]


def test_zero_size_ends_the_section_quietly() -> None:
    # Cassandra's legacy end-of-segment marker: the rest of that section is ignored, the next is read.
    built = _uncompressed([frame_entry(b"a" * 20) + bytes(4) + b"junk", [b"c" * 30]])
    result = read_segment(built.data, completed=True, name=built.name)
    assert [e.data for e in result.entries] == [b"a" * 20, b"c" * 30]
    assert result.damage == []


@pytest.mark.parametrize(("next_value", "crc"), [(999, 0), (0, None), (1 << 30, None)])
def test_bad_last_marker_is_torn_while_live_and_damage_once_completed(
    next_value: int, crc: int | None
) -> None:
    built = _uncompressed([bodies(3, 1), bodies(3, 2)])
    data = bytearray(built.data)
    marker = built.file_ends[-1]  # where the zero marker sits
    good_crc = zlib.crc32(struct.pack(">III", 77, 0, marker))
    struct.pack_into(">iI", data, marker, next_value, good_crc if crc is None else crc)
    live = read_segment(bytes(data), name=built.name)
    assert live.damage == [] and live.stop is StopReason.TORN and len(live.entries) == 6
    assert live.resume_position == built.section_ends[-1]
    closed = read_segment(bytes(data), completed=True, name=built.name)
    assert len(closed.entries) == 6 and closed.stop is StopReason.DAMAGED
    [damage] = closed.damage
    assert damage.scope is DamageScope.SEGMENT_REST and damage.offset == marker
    assert isinstance(damage.error, CorruptSectionError) and damage.error.offset == marker


def test_corrupt_compressed_section_is_lost_and_reading_goes_on() -> None:
    mutations = bodies(12, seed=5, min_size=200)
    built = build_segment(9, [mutations[:4], mutations[4:8], mutations[8:]], codec=Codec.LZ4)
    data = bytearray(built.data)
    data[built.marker_offsets[1] + 12 + 4 : built.marker_offsets[2]] = bytes(
        built.marker_offsets[2] - built.marker_offsets[1] - 16
    )
    result = read_segment(bytes(data), completed=True, name=built.name)
    assert [e.data for e in result.entries] == mutations[:4] + mutations[8:]
    [damage] = result.damage
    assert damage.scope is DamageScope.SECTION and damage.offset == built.marker_offsets[1]
    # Logical positions after the lost section are still right: they come from its length field.
    assert [e.position for e in result.entries[4:]] == built.entry_positions[2]
    # A last section that does not decompress (or is cut short) in a live segment may still be being
    # written: no damage yet, stop before it.
    tail = bytearray(built.data)
    tail[built.marker_offsets[2] + 12] ^= 0x01  # the LZ4 length prefix
    for visible in (bytes(tail), built.data[:-3]):
        live = read_segment(visible, name=built.name)
        assert live.damage == [] and live.stop is StopReason.TORN
        assert live.resume_position == built.section_ends[1]
        assert [e.data for e in live.entries] == mutations[:8]
    closed = read_segment(bytes(tail), name=built.name, completed=True)
    assert [d.scope for d in closed.damage] == [DamageScope.SECTION]


def test_path_and_bytes_agree(tmp_path: Path) -> None:
    built = build_segment(11, [bodies(20, 9), bodies(20, 10)], codec=Codec.SNAPPY)
    path = tmp_path / built.name
    path.write_bytes(built.data)
    from_file = read_segment(path, completed=True)
    assert triples(from_file.entries) == triples(
        read_segment(built.data, completed=True, name=built.name).entries
    )
    assert from_file.segment == built.name
    middle = from_file.entries[25].end
    assert triples(read_segment(path, start=middle, completed=True).entries) == triples(
        from_file.entries[26:]
    )


# --------------------------------------------------------------------------------------------------
# Names, headers, codecs
# --------------------------------------------------------------------------------------------------


def test_segment_and_index_names() -> None:
    name = parse_segment_name("CommitLog-7-1699285478684.log")
    assert (name.version, name.segment_id) == (7, 1699285478684)
    assert name.index_file == "CommitLog-7-1699285478684_cdc.idx"
    assert parse_index_name(name.index_file) == name == parse_index_name("CommitLog-7-1699285478684-CDC.idx")
    for bad in ("CommitLog-12345.log", "CommitLog-7-12.log.tmp", "commitlog-7-1.log", "CommitLog-7-x.log"):
        with pytest.raises(SegmentFormatError):
            parse_segment_name(bad)
    with pytest.raises(SegmentFormatError):
        parse_index_name("CommitLog-7-1.log")


def test_header_errors_name_the_segment() -> None:
    good = build_segment(123, [[b"m" * 12]])
    bad_crc = bytearray(good.data)
    bad_crc[17] ^= 1
    with pytest.raises(SegmentFormatError) as info:
        read_segment(bytes(bad_crc), completed=True, name=good.name)
    assert info.value.segment == good.name and "CRC" in info.value.reason
    with pytest.raises(SegmentFormatError, match="file name says"):
        read_segment(good.data, completed=True, name="CommitLog-7-124.log")
    for version in (4, 9):
        old = build_segment(123, [[b"m" * 12]], version=version)
        with pytest.raises(UnsupportedSegmentError) as unsupported:
            read_segment(old.data, completed=True, name=old.name)
        assert unsupported.value.segment == old.name and f"version {version}" in unsupported.value.reason


def test_encrypted_and_unknown_codec_headers_are_unsupported() -> None:
    encrypted = encode_header(7, 5, {"encCipher": "AES/CBC/PKCS5Padding", "encIV": "00", "encKeyAlias": "k"})
    with pytest.raises(UnsupportedSegmentError, match="encrypt"):
        read_segment(encrypted + bytes(16), completed=True, name="CommitLog-7-5.log")
    odd = encode_header(7, 5, {"compressionClass": "com.example.LZ4Compressor"})
    with pytest.raises(UnsupportedSegmentError, match=r"com\.example\.LZ4Compressor"):
        read_segment(odd + bytes(16), completed=True, name="CommitLog-7-5.log")


def test_codec_class_names() -> None:
    for short, codec in [
        ("LZ4Compressor", Codec.LZ4),
        ("SnappyCompressor", Codec.SNAPPY),
        ("DeflateCompressor", Codec.DEFLATE),
        ("ZstdCompressor", Codec.ZSTD),
    ]:
        assert codec_for_class(short) is codec
        assert codec_for_class("org.apache.cassandra.io.compress." + short) is codec
        assert compressor_class(codec).endswith(short)
    for unknown in ("NoopCompressor", "GzipCompressor", ""):
        with pytest.raises(UnsupportedSegmentError):
            codec_for_class(unknown, segment="CommitLog-7-1.log")


@pytest.mark.parametrize("codec", list(Codec))
def test_decompress_checks_the_length_before_trusting_the_data(codec: Codec) -> None:
    payload = b"cassandra commit log " * 50
    packed = compress(codec, payload)
    assert decompress(codec, packed, len(payload)) == payload
    for wrong in (len(payload) - 1, len(payload) + 1, 1 << 30, -1):
        with pytest.raises(CorruptSectionError):
            decompress(codec, packed, wrong, segment="s", offset=1)
    with pytest.raises(CommitLogError):
        decompress(codec, packed[: len(packed) // 2], len(payload))


def test_zstd_frame_without_content_size() -> None:
    # zstd-jni writes the content size, but a frame without it must still decode, bounded by the length.
    payload = b"commit log " * 300
    packed = zstandard.ZstdCompressor(write_content_size=False).compress(payload)
    assert decompress(Codec.ZSTD, packed, len(payload)) == payload
    with pytest.raises(CorruptSectionError):
        decompress(Codec.ZSTD, packed, len(payload) - 1)
