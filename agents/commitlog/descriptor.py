"""Segment file names and the descriptor header at offset 0 (format reference §2.1 and §3).

The header tells us the descriptor version (hence which MessagingService format the mutations use),
the segment id that every sync-marker CRC depends on, and whether sections are compressed or
encrypted. Nothing after the header can be read without it.
"""

from __future__ import annotations

import json
import os
import re
import struct
import zlib
from dataclasses import dataclass, field
from typing import Any

from agents.commitlog.compression import Codec, codec_for_class
from agents.commitlog.errors import SegmentFormatError, UnsupportedSegmentError

# Descriptor version -> MessagingService version of the mutation bytes (CommitLogDescriptor).
MESSAGING_VERSIONS: dict[int, int] = {6: 10, 7: 12, 8: 13}
# 2.2 segments: same header, section and entry framing, but pre-3.0 mutation bodies we do not decode.
FRAMING_ONLY_VERSIONS: frozenset[int] = frozenset({5})
SUPPORTED_VERSIONS: frozenset[int] = frozenset(MESSAGING_VERSIONS) | FRAMING_ONLY_VERSIONS

HEADER_FIXED_SIZE = 14  # version(4) + id(8) + params length(2)
HEADER_CRC_SIZE = 4
ENCRYPTION_PARAMS = ("encCipher", "encIV", "encKeyAlias")

_SEGMENT_NAME = re.compile(r"CommitLog-([0-9]+)-([0-9]+)\.log")
# 4.0/4.1/5.0 write `_cdc.idx`; one upstream commit used `-CDC.idx` (reference §12.6), so accept both.
_INDEX_NAME = re.compile(r"CommitLog-([0-9]+)-([0-9]+)(?:_cdc|-CDC)\.idx")
_HEADER_START = struct.Struct(">iqH")
_CRC_INTS = struct.Struct(">IIII")
_U32 = struct.Struct(">I")


@dataclass(frozen=True, slots=True)
class SegmentName:
    """Descriptor version and segment id as encoded in a segment's (or its CDC index's) file name."""

    version: int
    segment_id: int

    @property
    def segment_file(self) -> str:
        return f"CommitLog-{self.version}-{self.segment_id}.log"

    @property
    def index_file(self) -> str:
        return f"CommitLog-{self.version}-{self.segment_id}_cdc.idx"


@dataclass(frozen=True, slots=True)
class SegmentDescriptor:
    """What the header at offset 0 says about a segment."""

    version: int
    segment_id: int
    header_end: int  # offset of the first sync marker, in both file and logical coordinates
    header_crc: int
    compression: Codec | None
    compression_class: str | None
    encrypted: bool
    messaging_version: int | None  # None: framing only, the mutation bodies are pre-3.0
    params: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def framing_only(self) -> bool:
        return self.messaging_version is None


def parse_segment_name(name: str) -> SegmentName:
    """Parse ``CommitLog-<version>-<id>.log``; anything else (incl. pre-1.2.5 names) is a format error."""
    match = _SEGMENT_NAME.fullmatch(name)
    if match is None:
        raise SegmentFormatError(f"not a commit-log segment name: {name!r}", segment=name)
    return SegmentName(int(match[1]), int(match[2]))


def parse_index_name(name: str) -> SegmentName:
    """Parse ``CommitLog-<version>-<id>_cdc.idx`` (or the ``-CDC.idx`` spelling)."""
    match = _INDEX_NAME.fullmatch(name)
    if match is None:
        raise SegmentFormatError(f"not a CDC index file name: {name!r}", segment=name)
    return SegmentName(int(match[1]), int(match[2]))


def header_complete(data: bytes | memoryview) -> bool:
    """Whether enough bytes exist to parse the header (a live segment may not have written it yet)."""
    if len(data) < HEADER_FIXED_SIZE:
        return False
    params_length = _HEADER_START.unpack_from(data, 0)[2]
    return len(data) >= HEADER_FIXED_SIZE + params_length + HEADER_CRC_SIZE


def parse_descriptor(
    data: bytes | memoryview,
    *,
    segment: str,
    expected: SegmentName | None = None,
    check_supported: bool = True,
) -> SegmentDescriptor:
    """Parse and CRC-check the header at the start of ``data``.

    ``expected`` (from the file name) must agree with the header. With ``check_supported`` (the default)
    versions we cannot frame and encrypted segments raise UnsupportedSegmentError; without it the
    descriptor is returned for inspection and reporting.
    """
    if not header_complete(data):
        raise SegmentFormatError(f"header truncated: only {len(data)} bytes", segment=segment, offset=0)
    version, segment_id, params_length = _HEADER_START.unpack_from(data, 0)
    params_end = HEADER_FIXED_SIZE + params_length
    params_bytes = bytes(data[HEADER_FIXED_SIZE:params_end])
    (stored_crc,) = _U32.unpack_from(data, params_end)
    id_bits = segment_id & 0xFFFFFFFFFFFFFFFF
    crc = zlib.crc32(_CRC_INTS.pack(version & 0xFFFFFFFF, id_bits & 0xFFFFFFFF, id_bits >> 32, params_length))
    crc = zlib.crc32(params_bytes, crc)
    if crc != stored_crc:
        raise SegmentFormatError(
            f"descriptor header CRC mismatch (stored {stored_crc:#010x}, computed {crc:#010x})",
            segment=segment,
            offset=params_end,
        )
    if expected is not None and (expected.version, expected.segment_id) != (version, segment_id):
        raise SegmentFormatError(
            f"header says version {version} id {segment_id}, file name says version {expected.version} "
            f"id {expected.segment_id}",
            segment=segment,
            offset=0,
        )
    params = _parse_params(params_bytes, segment)
    encrypted = any(key in params for key in ENCRYPTION_PARAMS)
    compression_class = params.get("compressionClass")
    if compression_class is not None and not isinstance(compression_class, str):
        raise SegmentFormatError(f"compressionClass is not a string: {compression_class!r}", segment=segment)
    compression: Codec | None = None
    if check_supported:
        if version not in SUPPORTED_VERSIONS:
            raise UnsupportedSegmentError(
                f"commit-log descriptor version {version} is not supported "
                f"(supported: {sorted(SUPPORTED_VERSIONS)})",
                segment=segment,
                offset=0,
            )
        if encrypted:
            raise UnsupportedSegmentError(
                f"segment is encrypted (cipher {params.get('encCipher')!r}, key alias "
                f"{params.get('encKeyAlias')!r}); encrypted commit logs are not supported",
                segment=segment,
                offset=0,
            )
    if compression_class is not None:
        try:
            compression = codec_for_class(compression_class, segment=segment)
        except UnsupportedSegmentError:
            if check_supported:
                raise
    return SegmentDescriptor(
        version=version,
        segment_id=segment_id,
        header_end=params_end + HEADER_CRC_SIZE,
        header_crc=stored_crc,
        compression=compression,
        compression_class=compression_class,
        encrypted=encrypted,
        messaging_version=MESSAGING_VERSIONS.get(version),
        params=params,
    )


def read_descriptor(path: str | os.PathLike[str], *, check_supported: bool = True) -> SegmentDescriptor:
    """Read and parse the header of a segment file, checking it against the file name."""
    name = os.path.basename(os.fspath(path))
    expected = parse_segment_name(name)
    with open(path, "rb") as handle:
        head = handle.read(HEADER_FIXED_SIZE)
        if len(head) == HEADER_FIXED_SIZE:
            head += handle.read(_HEADER_START.unpack(head)[2] + HEADER_CRC_SIZE)
    return parse_descriptor(head, segment=name, expected=expected, check_supported=check_supported)


def encode_header(version: int, segment_id: int, params: dict[str, Any] | None = None) -> bytes:
    """Serialize a descriptor header exactly as Cassandra does (used to write test segments)."""
    params_bytes = json.dumps(params or {}, separators=(",", ":"), sort_keys=True).encode()
    id_bits = segment_id & 0xFFFFFFFFFFFFFFFF
    crc = zlib.crc32(
        _CRC_INTS.pack(version & 0xFFFFFFFF, id_bits & 0xFFFFFFFF, id_bits >> 32, len(params_bytes))
    )
    crc = zlib.crc32(params_bytes, crc)
    return _HEADER_START.pack(version, segment_id, len(params_bytes)) + params_bytes + _U32.pack(crc)


def _parse_params(raw: bytes, segment: str) -> dict[str, Any]:
    try:
        params = json.loads(raw.decode("utf-8")) if raw.strip() else {}
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise SegmentFormatError(
            f"header parameters are not JSON: {exc}", segment=segment, offset=14
        ) from exc
    if not isinstance(params, dict):
        raise SegmentFormatError(f"header parameters are not a JSON object: {raw[:80]!r}", segment=segment)
    return params
