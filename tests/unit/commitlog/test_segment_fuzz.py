"""Seeded fuzzing of the framing layer with damaged copies of real segments.

Whatever the damage, reading must terminate, raise nothing but CommitLogError subclasses, and never
return an entry whose CRCs fail: for uncompressed segments every returned entry is re-checked against the
damaged bytes themselves; for compressed ones it must be byte-identical to an entry of the clean read.
"""

from __future__ import annotations

import random
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from agents.commitlog.cdc_index import CdcIndex, format_cdc_index, parse_cdc_index
from agents.commitlog.compression import Codec
from agents.commitlog.descriptor import encode_header
from agents.commitlog.errors import CommitLogError, SegmentFormatError
from agents.commitlog.segment_reader import SegmentReadResult, StopReason, read_segment
from tests.unit.commitlog.test_segment_reader import (
    bodies,
    build_segment,
    reference_sections,
    segments,
    triples,
)

SEED = 20240917
FUZZ_TIMEOUT = 60


@dataclass
class Target:
    name: str
    data: bytes
    compressed: bool
    clean: SegmentReadResult
    span: int  # bytes worth damaging: past this an mmap segment is only zeros
    hotspots: list[int]  # header, sync markers, section lengths and entry headers: framing, not data

    @property
    def clean_set(self) -> set[tuple[int, int, bytes]]:
        return set(triples(self.clean.entries))


def _target(name: str, data: bytes) -> Target:
    clean = read_segment(data, completed=True, name=name)
    assert clean.damage == [] and clean.descriptor is not None
    compressed = clean.descriptor.compression is not None
    span = len(data) if compressed else min(len(data), clean.resume_position + 64)
    hotspots = list(range(clean.descriptor.header_end))
    for section in reference_sections(data):
        hotspots += range(section.offset, section.offset + (12 if compressed else 8))
    if not compressed:
        for entry in clean.entries:
            hotspots += range(entry.position, entry.position + 8)
    return Target(name, data, compressed, clean, span, hotspots)


@pytest.fixture(scope="module")
def targets(legacy_commitlog_dir: Path) -> dict[str, Target]:
    found = {}
    for folder in ("2.2-lz4", "2.2-snappy", "3.0.13-encrypted", "3.0.29-encrypted", "4.0.11-encrypted"):
        path = segments(legacy_commitlog_dir / folder)[0]
        found[folder] = _target(path.name, path.read_bytes())
    for codec in (Codec.DEFLATE, Codec.ZSTD):
        built = build_segment(31337, [bodies(15, seed=i) for i in range(8)], codec=codec)
        found[f"written-{codec}"] = _target(built.name, built.data)
    return found


def _guarded(read: Callable[[], SegmentReadResult]) -> SegmentReadResult | None:
    """Run a read; a CommitLogError is an acceptable outcome, any other exception fails the test."""
    try:
        return read()
    except CommitLogError:
        return None


def _check_entries(target: Target, damaged: bytes, result: SegmentReadResult) -> None:
    previous_end = -1
    for entry in result.entries:
        assert entry.position >= previous_end and entry.end == entry.position + len(entry.data) + 12
        previous_end = entry.end
    if not target.compressed:
        # Logical positions are file offsets: the CRCs must hold in the damaged bytes themselves.
        for entry in result.entries:
            raw = damaged[entry.position : entry.end]
            size, size_crc = struct.unpack_from(">iI", raw)
            assert size == len(entry.data) and raw[8:-4] == entry.data
            assert zlib.crc32(raw[:4]) == size_crc
            assert zlib.crc32(raw[:4] + entry.data) == struct.unpack(">I", raw[-4:])[0]
        return
    # Compressed: every entry is one of the clean read's; before the first damage, at the same position
    # (after a damaged section length, later positions may shift, as they would for Cassandra).
    clean_data = {e.data for e in target.clean.entries}
    first_damage = min((d.position for d in result.damage), default=None)
    clean_set = target.clean_set
    for entry in result.entries:
        assert entry.data in clean_data
        if first_damage is None or entry.position < first_damage:
            assert (entry.position, entry.end, entry.data) in clean_set


def _flip_bits(rng: random.Random, target: Target) -> bytes:
    damaged = bytearray(target.data)
    for _ in range(rng.randint(1, 8)):
        position = rng.randrange(target.span)
        damaged[position] ^= 1 << rng.randrange(8)
    return bytes(damaged)


def _hit_framing(rng: random.Random, target: Target) -> bytes:
    damaged = bytearray(target.data)
    for _ in range(rng.randint(1, 3)):
        damaged[rng.choice(target.hotspots)] ^= 1 << rng.randrange(8)
    return bytes(damaged)


def _damage(rng: random.Random, target: Target) -> bytes:
    return rng.choices([_flip_bits, _overwrite, _hit_framing], weights=[4, 3, 3])[0](rng, target)


def _overwrite(rng: random.Random, target: Target) -> bytes:
    damaged = bytearray(target.data)
    start = rng.randrange(target.span)
    length = rng.randint(1, 64)
    filler = rng.choice([b"\x00", b"\xff", None])
    damaged[start : start + length] = rng.randbytes(length) if filler is None else filler * length
    return bytes(damaged[: len(target.data)])


ITERATIONS = {
    "2.2-lz4": 80,
    "2.2-snappy": 80,
    "3.0.13-encrypted": 120,
    "3.0.29-encrypted": 300,
    "4.0.11-encrypted": 300,
    "written-deflate": 200,
    "written-zstd": 200,
}


@pytest.mark.timeout(FUZZ_TIMEOUT)
@pytest.mark.parametrize("target_name", sorted(ITERATIONS))
def test_damaged_segments(targets: dict[str, Target], target_name: str) -> None:
    target = targets[target_name]
    rng = random.Random(f"{SEED}-{target_name}")
    for _ in range(ITERATIONS[target_name]):
        damaged = _damage(rng, target)
        completed = rng.random() < 0.7
        strict = rng.random() < 0.1
        result = _guarded(
            lambda d=damaged, c=completed, s=strict: read_segment(d, completed=c, strict=s, name=target.name)
        )
        if result is None:
            continue
        _check_entries(target, damaged, result)
        assert result.stop in StopReason
        if strict:
            assert result.damage == []


@pytest.mark.timeout(FUZZ_TIMEOUT)
@pytest.mark.parametrize("target_name", sorted(ITERATIONS))
def test_truncated_segments(targets: dict[str, Target], target_name: str) -> None:
    target = targets[target_name]
    rng = random.Random(f"{SEED}-truncate-{target_name}")
    clean = triples(target.clean.entries)
    for _ in range(max(10, ITERATIONS[target_name] // 3)):
        cut = target.data[: rng.randrange(target.span + 1)]
        live = _guarded(lambda c=cut: read_segment(c, name=target.name))
        # A live segment cut anywhere is only a torn tail: never an error, never damage.
        assert live is not None and live.damage == []
        assert triples(live.entries) == clean[: len(live.entries)]
        closed = _guarded(lambda c=cut: read_segment(c, completed=True, name=target.name))
        if closed is not None:
            assert triples(closed.entries) == triples(live.entries)
            assert len(closed.damage) <= 1


@pytest.mark.timeout(FUZZ_TIMEOUT)
@pytest.mark.parametrize(
    "target_name", ["2.2-lz4", "2.2-snappy", "3.0.29-encrypted", "4.0.11-encrypted", "written-zstd"]
)
def test_incremental_reads_of_damaged_segments_equal_a_full_read(
    targets: dict[str, Target], target_name: str
) -> None:
    target = targets[target_name]
    rng = random.Random(f"{SEED}-incremental-{target_name}")
    logical_end = target.clean.resume_position
    for _ in range(30):
        damaged = _damage(rng, target)
        full = _guarded(lambda d=damaged: read_segment(d, completed=True, name=target.name))
        if full is None:
            continue
        cuts = sorted(rng.randint(0, logical_end + 16) for _ in range(rng.randint(1, 12)))
        entries, damage, start = [], [], 0
        for cut in [*cuts, None]:
            step = read_segment(damaged, start=start, limit=cut, completed=cut is None, name=target.name)
            assert all(e.position >= start for e in step.entries)
            assert cut is None or all(e.end <= cut for e in step.entries)
            entries += step.entries
            damage += step.damage
            start = step.resume_position
        assert triples(entries) == triples(full.entries)
        assert [(d.offset, d.position, d.scope) for d in damage] == [
            (d.offset, d.position, d.scope) for d in full.damage
        ]


@pytest.mark.timeout(FUZZ_TIMEOUT)
def test_garbage_files() -> None:
    rng = random.Random(f"{SEED}-garbage")
    name = "CommitLog-7-1234.log"
    header = encode_header(7, 1234)
    for _ in range(400):
        shape = rng.random()
        if shape < 0.4:
            data = rng.randbytes(rng.randint(0, 200))
        elif shape < 0.8:
            data = header + rng.randbytes(rng.randint(0, 300))
        else:
            data = header + bytes(rng.randint(0, 40)) + rng.randbytes(rng.randint(0, 40))
        for completed in (False, True):
            result = _guarded(lambda d=data, c=completed: read_segment(d, completed=c, name=name))
            if result is None:
                continue
            for entry in result.entries:
                raw = data[entry.position : entry.end]
                size_bytes = raw[:4]
                assert zlib.crc32(size_bytes) == struct.unpack(">I", raw[4:8])[0]
                assert zlib.crc32(size_bytes + entry.data) == struct.unpack(">I", raw[-4:])[0]


@pytest.mark.timeout(FUZZ_TIMEOUT)
def test_garbage_cdc_index_content() -> None:
    rng = random.Random(f"{SEED}-idx")
    valid = [format_cdc_index(rng.randrange(1 << 31), rng.random() < 0.5) for _ in range(50)]
    samples: list[str | bytes] = []
    for text in valid:
        samples += [text[: rng.randrange(len(text) + 1)] for _ in range(3)]
        flipped = bytearray(text.encode())
        flipped[rng.randrange(len(flipped))] ^= 1 << rng.randrange(8)
        samples.append(bytes(flipped))
    samples += [rng.randbytes(rng.randint(0, 40)) for _ in range(300)]
    alphabet = "0123456789\nCOMPLETED \r\t-x"
    samples += ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 20))) for _ in range(300)]
    for sample in samples:
        try:
            parsed = parse_cdc_index(sample, name="CommitLog-7-1_cdc.idx")
        except SegmentFormatError as exc:
            assert exc.segment == "CommitLog-7-1_cdc.idx"
            continue
        assert parsed is None or (isinstance(parsed, CdcIndex) and parsed.offset >= 0)
