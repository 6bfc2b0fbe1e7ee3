"""The cdc_raw folder as a consumer sees it: segments in id order, each with its durable offset, and the
`_cdc.idx` files left without their segment."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from agents.commitlog.cdc_index import CdcIndex, read_cdc_index
from agents.commitlog.descriptor import SegmentName, parse_index_name, parse_segment_name
from agents.commitlog.errors import SegmentFormatError


@dataclass(slots=True, frozen=True)
class CdcSegment:
    """One hard-linked segment and its index; `index` is None while Cassandra has not written one yet."""

    path: Path
    name: SegmentName
    index: CdcIndex | None
    index_error: str | None = None
    """Why the `_cdc.idx` beside it is unreadable (never written so by Cassandra: reported, not fatal)."""

    @property
    def index_path(self) -> Path:
        return self.path.with_name(self.name.index_file)

    def durable_bytes(self) -> bytes:
        """The segment up to its durable offset: what a reader may decode now without racing Cassandra."""
        if self.index is None:
            return b""
        with self.path.open("rb") as f:
            return f.read(self.index.offset)


def list_cdc_segments(cdc_raw: Path) -> list[CdcSegment]:
    """Every `CommitLog-<v>-<id>.log` in cdc_raw, oldest id first, with its parsed `_cdc.idx` if any."""
    segments = []
    for path in cdc_raw.glob("CommitLog-*.log"):
        try:
            name = parse_segment_name(path.name)
        except SegmentFormatError:
            continue  # not a segment (e.g. a temporary file): never ours to touch
        try:
            segments.append(CdcSegment(path, name, read_cdc_index(path.with_name(name.index_file))))
        except SegmentFormatError as exc:
            segments.append(CdcSegment(path, name, None, exc.reason))
    segments.sort(key=lambda s: s.name.segment_id)
    return segments


@dataclass(slots=True, frozen=True)
class OrphanIndex:
    """A `_cdc.idx` whose segment is not in cdc_raw; `index` is None while it is empty or unreadable.

    Cassandra writes the index of a segment holding CDC data at every sync, whether or not the hard link
    is still there: once it deleted the link of a segment still being synced (a full cdc_raw with
    cdc_block_writes false), the index comes back alone.
    """

    path: Path
    name: SegmentName
    index: CdcIndex | None


def list_orphan_indexes(cdc_raw: Path, segments: list[CdcSegment]) -> list[OrphanIndex]:
    """Every `_cdc.idx` in cdc_raw whose segment is not among `segments`, oldest id first."""
    present = {s.name.segment_id for s in segments}
    orphans = []
    for path in cdc_raw.glob("CommitLog-*.idx"):
        try:
            name = parse_index_name(path.name)
        except SegmentFormatError:
            continue
        if name.segment_id in present or path.with_name(name.segment_file).exists():
            continue  # its segment is there (or appeared after the listing)
        try:
            index = read_cdc_index(path)
        except SegmentFormatError:
            index = None
        orphans.append(OrphanIndex(path, name, index))
    orphans.sort(key=lambda o: o.name.segment_id)
    return orphans
