"""Walk a segment's sync sections and split them into CRC-checked entries (format reference §4, §5, §9).

Reading is incremental: a CDC agent reads a live segment up to the durable offset in its ``_cdc.idx``,
remembers ``resume_position`` and comes back when the offset grows. Positions are *logical*
(uncompressed) positions, the coordinates Cassandra uses for the idx offset and CommitLogPosition; for
uncompressed segments they equal file offsets.

Damage never stops a read that can go on. Following Cassandra's tolerant replay rules (§4.5): a bad body
CRC skips one entry; a bad size, size CRC or an entry overrunning its section loses the rest of that
section; a section that does not decompress is lost as a whole; a sync marker that is corrupt (or
points outside the file) ends the segment, since nothing after it can be located. Nothing whose CRC
failed is ever returned. While a segment is not COMPLETED, an unusable sync marker or section header,
and a last section that does not decompress, are a torn tail (the writer may not be done), not damage:
reading stops there without a report and resumes there next time; once COMPLETED they are damage.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from types import TracebackType
from typing import NoReturn

from agents.commitlog.compression import decompress
from agents.commitlog.descriptor import (
    HEADER_FIXED_SIZE,
    SegmentDescriptor,
    header_complete,
    parse_descriptor,
    parse_segment_name,
)
from agents.commitlog.errors import CorruptEntryError, CorruptSectionError

SYNC_MARKER_SIZE = 8
COMPRESSED_SECTION_HEADER_SIZE = 12  # marker + uncompressed length
ENTRY_OVERHEAD_SIZE = 12  # size, size CRC, body CRC
# Cassandra rejects smaller sizes as garbage that happens to pass the CRC (CASSANDRA-2128).
MIN_MUTATION_SIZE = 10
_MAX_POSITION = 0x7FFFFFFF  # positions are Java ints

_INT_UINT = struct.Struct(">iI")
_INT = struct.Struct(">i")
_UINT = struct.Struct(">I")
_UINT2 = struct.Struct(">II")
_USHORT = struct.Struct(">H")

Source = str | os.PathLike[str] | bytes | bytearray | memoryview


class StopReason(StrEnum):
    """Why a read ended where it did."""

    END = "end"  # zero sync marker, or end of file at a section boundary
    LIMIT = "limit"  # the next entry or section ends past ``limit``
    TORN = "torn"  # not COMPLETED and the next marker/section is not fully written yet
    DAMAGED = "damaged"  # a sync marker or section header is corrupt: nothing after it can be located


class DamageScope(StrEnum):
    """How much a damage record cost, and where reading went on."""

    ENTRY = "entry"  # one entry skipped (body CRC); reading went on with the next entry
    SECTION_REST = "section-rest"  # rest of a section skipped (size, size CRC, overrun); next section
    SECTION = "section"  # a whole compressed section skipped (decompression failed); next section
    SEGMENT_REST = "segment-rest"  # corrupt sync marker or section header; reading of the segment ended


@dataclass(slots=True)
class LogEntry:
    """One CRC-valid entry: the serialized mutation and its logical extent in the segment.

    ``end`` is the position just past the entry's body CRC: what Cassandra reports as the mutation's
    position, and what the idx offset is compared against.
    """

    segment_id: int
    position: int
    end: int
    data: bytes


@dataclass(frozen=True, slots=True)
class Damage:
    """One corrupt region found while reading (reported, never raised unless reading is strict)."""

    segment: str
    offset: int  # file offset: of the entry (uncompressed) or of its section's sync marker (compressed)
    position: int  # logical position of the damaged entry or section
    scope: DamageScope
    error: CorruptSectionError | CorruptEntryError

    @property
    def reason(self) -> str:
        return self.error.reason


@dataclass(slots=True)
class SegmentReadResult:
    """Everything one read of ``[start, limit)`` produced."""

    segment: str
    descriptor: SegmentDescriptor | None  # None: not COMPLETED and the header is not written yet
    entries: list[LogEntry]
    damage: list[Damage]
    # Pass as ``start`` next time. It passes ``limit`` only over bytes known to hold nothing readable
    # (a damaged or legacy-terminated section's rest).
    resume_position: int
    stop: StopReason
    completed: bool

    @property
    def finished(self) -> bool:
        """Nothing more will ever be read from this segment."""
        return self.completed and self.stop in (StopReason.END, StopReason.DAMAGED)


class _MemorySource:
    """Bytes already in memory: reads are zero-copy slices."""

    __slots__ = ("_view", "size")

    def __init__(self, data: bytes | bytearray | memoryview) -> None:
        self._view = memoryview(data).cast("B")
        self.size = len(self._view)

    def read(self, offset: int, length: int) -> memoryview:
        return self._view[offset : offset + length]

    def close(self) -> None:
        self._view.release()


class _FileSource:
    """A segment file read with pread: only the markers and the sections we need, never the rest."""

    __slots__ = ("_fd", "size")

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._fd = os.open(path, os.O_RDONLY)
        self.size = os.fstat(self._fd).st_size  # a snapshot: a growing segment is re-read next time

    def read(self, offset: int, length: int) -> memoryview:
        length = max(0, min(length, self.size - offset))
        chunks = []
        while length > 0:
            chunk = os.pread(self._fd, length, offset)
            if not chunk:
                break
            chunks.append(chunk)
            offset += len(chunk)
            length -= len(chunk)
        return memoryview(chunks[0] if len(chunks) == 1 else b"".join(chunks))

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class _Stop(Exception):
    """Ends the section walk (internal control flow)."""

    def __init__(self, reason: StopReason) -> None:
        self.reason = reason


@dataclass(slots=True)
class _Section:
    """A section whose sync marker passed its CRC and whose bounds lie inside the file."""

    offset: int  # file offset of the sync marker
    position: int  # logical position of the sync marker
    payload_position: int  # logical position of the first entry
    end: int  # logical end (= logical position of the next sync marker)
    next_offset: int  # file offset of the next sync marker
    length: int  # uncompressed payload length


class SegmentScan:
    """One incremental read of a segment, as an iterator of entries.

    Iterate it for the entries in ``[start, limit)``; ``damage``, ``resume_position`` and ``stop`` are
    kept current as you go, so a consumer may stop early and resume from ``resume_position``. Use it as
    a context manager (or call ``close``) when the source is a path.
    """

    def __init__(
        self,
        source: Source,
        *,
        start: int = 0,
        limit: int | None = None,
        completed: bool = False,
        strict: bool = False,
        name: str | None = None,
    ) -> None:
        in_memory = isinstance(source, bytes | bytearray | memoryview)
        if in_memory:
            self.segment = name or "<memory>"
            self._source: _MemorySource | _FileSource = _MemorySource(source)
        else:
            self.segment = name or os.path.basename(os.fspath(source))
            self._source = _FileSource(source)
        self.start = max(0, start)
        self.limit = limit
        self.completed = completed
        self.strict = strict
        self.damage: list[Damage] = []
        self.resume_position = self.start
        self.stop: StopReason | None = None
        self._started = False
        self._compressed = False
        self._segment_id = 0
        try:
            self.descriptor = self._read_descriptor(named=name is not None or not in_memory)
        except BaseException:
            self.close()
            raise
        if self.descriptor is not None:
            self._compressed = self.descriptor.compression is not None
            self._segment_id = self.descriptor.segment_id

    def __enter__(self) -> SegmentScan:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._source.close()

    @property
    def finished(self) -> bool:
        """Nothing more will ever be read from this segment (it is COMPLETED and its end was reached)."""
        return self.completed and self.stop in (StopReason.END, StopReason.DAMAGED)

    def __iter__(self) -> Iterator[LogEntry]:
        if self._started:
            raise RuntimeError("a SegmentScan can be iterated once")
        self._started = True
        if self.descriptor is None:
            self.stop = StopReason.TORN
            return
        try:
            yield from self._walk(self.descriptor)
        except _Stop as stop:
            self.stop = stop.reason

    # -- header ------------------------------------------------------------------------------------

    def _read_descriptor(self, *, named: bool) -> SegmentDescriptor | None:
        expected = parse_segment_name(self.segment) if named else None
        head = self._source.read(0, HEADER_FIXED_SIZE)
        if not self.completed and (len(head) < HEADER_FIXED_SIZE or not any(head)):
            return None  # a live segment whose header is not written yet
        if len(head) == HEADER_FIXED_SIZE:
            params_length = _USHORT.unpack_from(head, HEADER_FIXED_SIZE - 2)[0]
            head = self._source.read(0, HEADER_FIXED_SIZE + params_length + 4)
            if not self.completed and not header_complete(head):
                return None
        return parse_descriptor(head, segment=self.segment, expected=expected)

    # -- sections ----------------------------------------------------------------------------------

    def _walk(self, desc: SegmentDescriptor) -> Iterator[LogEntry]:
        limit = _MAX_POSITION + 1 if self.limit is None else self.limit
        header_size = COMPRESSED_SECTION_HEADER_SIZE if self._compressed else SYNC_MARKER_SIZE
        id_bits = desc.segment_id & 0xFFFFFFFFFFFFFFFF
        id_crc = zlib.crc32(_UINT2.pack(id_bits & 0xFFFFFFFF, id_bits >> 32))
        offset = position = desc.header_end
        while True:
            if position >= limit:
                raise _Stop(StopReason.LIMIT)
            self._advance(position)
            section = self._next_section(offset, position, header_size, id_crc)
            if section.end > self.start:
                if section.length == 0:
                    if section.end > limit:
                        raise _Stop(StopReason.LIMIT)
                    self._advance(section.end)
                elif self._compressed:
                    yield from self._compressed_section(desc, section, limit)
                else:
                    yield from self._plain_section(section, limit)
            offset, position = section.next_offset, section.end

    def _next_section(self, offset: int, position: int, header_size: int, id_crc: int) -> _Section:
        """Read and check the sync marker (and section length) at ``offset``, or end the walk."""
        size = self._source.size
        raw = self._source.read(offset, header_size)
        if len(raw) < header_size:
            if self.completed and not any(raw):
                raise _Stop(StopReason.END)
            self._segment_damage(
                offset, position, f"truncated sync marker: only {len(raw)} bytes left in the file"
            )
        next_offset, crc = _INT_UINT.unpack_from(raw, 0)
        if crc != zlib.crc32(_UINT.pack(offset), id_crc):
            if next_offset == 0 and crc == 0:
                raise _Stop(StopReason.END)
            self._segment_damage(
                offset, position, f"sync marker CRC mismatch (next {next_offset}, crc {crc:#010x})"
            )
        if next_offset < offset + header_size or next_offset > size:
            self._segment_damage(
                offset,
                position,
                f"sync marker has a valid CRC but points to {next_offset} (file length {size})",
            )
        if self._compressed:
            length = _INT.unpack_from(raw, SYNC_MARKER_SIZE)[0]
            if length < 0 or position + SYNC_MARKER_SIZE + length > _MAX_POSITION:
                self._segment_damage(offset, position, f"invalid uncompressed section length {length}")
        else:
            length = next_offset - offset - SYNC_MARKER_SIZE
        payload = position + SYNC_MARKER_SIZE
        return _Section(offset, position, payload, payload + length, next_offset, length)

    def _plain_section(self, section: _Section, limit: int) -> Iterator[LogEntry]:
        # File offsets are logical positions: read only from ``start`` and only up to ``limit``.
        first = max(section.payload_position, self.start)
        last = min(section.end, max(limit, first))
        buf = self._source.read(first, last - first)
        if len(buf) < last - first:  # the file shrank under us
            self._segment_damage(section.offset, section.position, "section extends past the end of the file")
        yield from self._entries(buf, first, section, limit)

    def _compressed_section(
        self, desc: SegmentDescriptor, section: _Section, limit: int
    ) -> Iterator[LogEntry]:
        data_offset = section.offset + COMPRESSED_SECTION_HEADER_SIZE
        data = self._source.read(data_offset, section.next_offset - data_offset)
        assert desc.compression is not None
        try:
            payload = decompress(
                desc.compression, data, section.length, segment=self.segment, offset=section.offset
            )
        except CorruptSectionError as exc:
            if not self.completed and section.next_offset >= self._source.size:
                raise _Stop(StopReason.TORN) from exc  # the last section may still be being written
            self._report(Damage(self.segment, section.offset, section.position, DamageScope.SECTION, exc))
            self._advance(section.end)
            return
        yield from self._entries(memoryview(payload), section.payload_position, section, limit)

    # -- entries -----------------------------------------------------------------------------------

    def _entries(self, buf: memoryview, base: int, section: _Section, limit: int) -> Iterator[LogEntry]:
        """Split payload bytes (``buf[0]`` is at logical ``base``) into entries from ``start`` to ``limit``.

        ``buf`` may stop at ``limit``; every byte is bounds-checked against ``lim`` before it is read, and
        entry bounds against the section end ``n``.
        """
        n = section.end - base
        pos = max(0, self.start - base)
        lim = min(n, limit - base)
        segment_id = self._segment_id
        unpack = _INT_UINT.unpack_from
        unpack_int = _INT.unpack_from
        unpack_uint = _UINT.unpack_from
        crc32 = zlib.crc32
        while pos < n:
            if pos >= lim:
                raise _Stop(StopReason.LIMIT)
            if pos + 4 > n:
                self._entry_damage(section, base + pos, "fewer than 4 bytes left for an entry size")
                return
            if pos + 4 > lim:
                raise _Stop(StopReason.LIMIT)
            if unpack_int(buf, pos)[0] == 0:
                # Cassandra's legacy end-of-segment marker: the rest of the section holds nothing.
                self._advance(section.end)
                return
            if pos + 8 > n:
                self._entry_damage(section, base + pos, "entry header cut off by the end of its section")
                return
            if pos + 8 > lim:
                raise _Stop(StopReason.LIMIT)
            size, size_crc = unpack(buf, pos)
            if crc32(buf[pos : pos + 4]) != size_crc:
                self._entry_damage(section, base + pos, f"entry size CRC mismatch (size {size})")
                return
            if size < MIN_MUTATION_SIZE:
                self._entry_damage(section, base + pos, f"invalid entry size {size}")
                return
            body_end = pos + 8 + size
            end = body_end + 4
            if end > n:
                self._entry_damage(section, base + pos, f"entry of size {size} overruns its section")
                return
            if end > lim:
                raise _Stop(StopReason.LIMIT)
            body = buf[pos + 8 : body_end]
            if crc32(body, size_crc) != unpack_uint(buf, body_end)[0]:
                self._entry_damage(
                    section, base + pos, f"entry body CRC mismatch (size {size})", skip_entry=True
                )
                pos = end
                self.resume_position = base + end
                continue
            self.resume_position = base + end
            yield LogEntry(segment_id, base + pos, base + end, body.tobytes())
            pos = end
        self._advance(section.end)

    # -- reporting ---------------------------------------------------------------------------------

    def _advance(self, position: int) -> None:
        if position > self.resume_position:
            self.resume_position = position

    def _report(self, damage: Damage) -> None:
        if self.strict:
            raise damage.error
        self.damage.append(damage)

    def _entry_damage(
        self, section: _Section, position: int, reason: str, *, skip_entry: bool = False
    ) -> None:
        if skip_entry:
            scope, detail = DamageScope.ENTRY, "entry skipped"
        else:
            scope, detail = (
                DamageScope.SECTION_REST,
                f"rest of the section up to position {section.end} skipped",
            )
        if self._compressed:
            offset = section.offset
            reason = f"{reason} at logical position {position} in the section at file offset {offset}"
        else:
            offset = position
        error = CorruptEntryError(f"{reason}; {detail}", segment=self.segment, offset=offset)
        self._report(Damage(self.segment, offset, position, scope, error))
        if not skip_entry:
            self._advance(section.end)

    def _segment_damage(self, offset: int, position: int, reason: str) -> NoReturn:
        """End the walk at an unusable marker or section header.

        While the segment is live this is a torn tail (the writer may not have finished it), and it ends
        the walk either way, so reporting it waits for COMPLETED: it is then reported exactly once.
        """
        if not self.completed:
            raise _Stop(StopReason.TORN)
        error = CorruptSectionError(
            f"{reason}; the rest of the segment cannot be located", segment=self.segment, offset=offset
        )
        self._report(Damage(self.segment, offset, position, DamageScope.SEGMENT_REST, error))
        raise _Stop(StopReason.DAMAGED)


def read_segment(
    source: Source,
    *,
    start: int = 0,
    limit: int | None = None,
    completed: bool = False,
    strict: bool = False,
    name: str | None = None,
) -> SegmentReadResult:
    """Read the entries of ``[start, limit)`` of one segment (a path, or its bytes) in one go.

    ``start`` must be 0 or a position this reader returned (``resume_position`` or an entry's ``end``).
    ``limit`` is a logical position no returned entry ends past: for a live segment, its idx offset
    (``CdcIndex.read_limit``); sync markers at or past it are not even read.
    ``completed`` says the segment is closed (its idx says COMPLETED, or it is replayed): only then are
    unwritten-looking markers and sections damage instead of a torn tail. ``strict`` raises the first
    damage instead of reporting it. ``name`` labels in-memory bytes (and is checked against the header).
    Raises SegmentFormatError / UnsupportedSegmentError for a name or header we cannot use, the first
    damage's CorruptSectionError / CorruptEntryError when strict, and OSError if the file cannot be read.
    """
    with SegmentScan(source, start=start, limit=limit, completed=completed, strict=strict, name=name) as scan:
        entries = list(scan)
    assert scan.stop is not None
    return SegmentReadResult(
        segment=scan.segment,
        descriptor=scan.descriptor,
        entries=entries,
        damage=scan.damage,
        resume_position=scan.resume_position,
        stop=scan.stop,
        completed=completed,
    )


__all__ = [
    "COMPRESSED_SECTION_HEADER_SIZE",
    "ENTRY_OVERHEAD_SIZE",
    "MIN_MUTATION_SIZE",
    "SYNC_MARKER_SIZE",
    "Damage",
    "DamageScope",
    "LogEntry",
    "SegmentReadResult",
    "SegmentScan",
    "StopReason",
    "read_segment",
]
