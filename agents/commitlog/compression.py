"""Decompress one commit-log section payload (format reference §4.3).

Each compressed section holds exactly one compressor call over the section's entry bytes, and its header
states the uncompressed length ``U``. Every codec is checked against ``U`` *before* it allocates, so a
flipped bit cannot make us allocate gigabytes; every library failure becomes a CorruptSectionError.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from enum import StrEnum

import cramjam
import lz4.block
import zstandard

from agents.commitlog.errors import CorruptSectionError, UnsupportedSegmentError

CASSANDRA_COMPRESS_PACKAGE = "org.apache.cassandra.io.compress."

# Worst-case expansion of one compressed byte: LZ4 ~255x, Snappy ~64x, Deflate ~1032x. Zstd is checked
# against the content size in its frame header instead.
_MAX_RATIO = 1100
_MAX_RATIO_SLACK = 64
_STREAM_CHUNK = 1 << 20  # bounded reads, so a corrupt length cannot allocate gigabytes at once


class Codec(StrEnum):
    """A commit-log compressor, by the short name we use in descriptors and metrics."""

    LZ4 = "lz4"
    SNAPPY = "snappy"
    DEFLATE = "deflate"
    ZSTD = "zstd"


_CLASS_TO_CODEC: dict[str, Codec] = {
    "LZ4Compressor": Codec.LZ4,
    "SnappyCompressor": Codec.SNAPPY,
    "DeflateCompressor": Codec.DEFLATE,
    "ZstdCompressor": Codec.ZSTD,
}

_ZSTD_DECOMPRESSOR = zstandard.ZstdDecompressor()

_Corrupt = Callable[[str], CorruptSectionError]


def codec_for_class(class_name: str, *, segment: str | None = None) -> Codec:
    """Map a ``compressionClass`` header value (short or fully qualified) to its codec.

    Cassandra writes whatever the yaml said, so only the simple class name is compared.
    """
    package, _, simple = class_name.rpartition(".")
    codec = _CLASS_TO_CODEC.get(simple)
    if codec is None or package not in ("", CASSANDRA_COMPRESS_PACKAGE.rstrip(".")):
        raise UnsupportedSegmentError(
            f"unsupported commit-log compressor class {class_name!r}", segment=segment
        )
    return codec


def compressor_class(codec: Codec) -> str:
    """The fully qualified Cassandra class name for a codec, as a writer would put it in the header."""
    for name, value in _CLASS_TO_CODEC.items():
        if value is codec:
            return CASSANDRA_COMPRESS_PACKAGE + name
    raise ValueError(codec)  # unreachable: every Codec member is in the table


def decompress(
    codec: Codec,
    data: bytes | memoryview,
    uncompressed_length: int,
    *,
    segment: str | None = None,
    offset: int | None = None,
) -> bytes:
    """Return exactly ``uncompressed_length`` bytes, or raise CorruptSectionError (never a library error)."""

    def corrupt(reason: str) -> CorruptSectionError:
        return CorruptSectionError(f"{codec} section: {reason}", segment=segment, offset=offset)

    if uncompressed_length < 0:
        raise corrupt(f"negative uncompressed length {uncompressed_length}")
    if codec is not Codec.ZSTD and uncompressed_length > len(data) * _MAX_RATIO + _MAX_RATIO_SLACK:
        raise corrupt(
            f"uncompressed length {uncompressed_length} is implausible for {len(data)} compressed bytes"
        )
    try:
        if codec is Codec.LZ4:
            out = _lz4(data, uncompressed_length, corrupt)
        elif codec is Codec.SNAPPY:
            out = _snappy(data, uncompressed_length, corrupt)
        elif codec is Codec.DEFLATE:
            out = _deflate(data, uncompressed_length, corrupt)
        else:
            out = _zstd(data, uncompressed_length, corrupt)
    except CorruptSectionError:
        raise
    except Exception as exc:  # each library has its own error types; none may escape
        raise corrupt(f"decompression failed: {type(exc).__name__}: {exc}") from exc
    if len(out) != uncompressed_length:
        raise corrupt(f"decompressed to {len(out)} bytes, header says {uncompressed_length}")
    return out


def compress(codec: Codec, payload: bytes) -> bytes:
    """Compress a payload the way Cassandra's compressor of that codec does (for writing test segments)."""
    if codec is Codec.LZ4:
        return lz4.block.compress(payload, store_size=True)
    if codec is Codec.SNAPPY:
        return bytes(cramjam.snappy.compress_raw(payload))
    if codec is Codec.DEFLATE:
        return zlib.compress(payload)
    return zstandard.ZstdCompressor(write_checksum=True, write_content_size=True).compress(payload)


def _lz4(data: bytes | memoryview, length: int, corrupt: _Corrupt) -> bytes:
    # Cassandra's LZ4Compressor prefixes the block with its uncompressed length, little-endian.
    if len(data) < 4:
        raise corrupt("LZ4 block shorter than its 4-byte length prefix")
    stored = int.from_bytes(data[:4], "little")
    if stored != length:
        raise corrupt(f"LZ4 length prefix {stored} differs from section length {length}")
    if length == 0:
        return b""
    return lz4.block.decompress(data[4:], uncompressed_size=length)


def _snappy(data: bytes | memoryview, length: int, corrupt: _Corrupt) -> bytes:
    # A raw snappy block starts with its uncompressed length as a little-endian base-128 varint.
    stored = 0
    for i in range(min(5, len(data))):
        stored |= (data[i] & 0x7F) << (7 * i)
        if data[i] < 0x80:
            break
    else:
        raise corrupt("snappy block has no valid length header")
    if stored != length:
        raise corrupt(f"snappy length header {stored} differs from section length {length}")
    return bytes(cramjam.snappy.decompress_raw(bytes(data)))


def _deflate(data: bytes | memoryview, length: int, corrupt: _Corrupt) -> bytes:
    inflater = zlib.decompressobj()
    out = inflater.decompress(data, length + 1)
    if not inflater.eof:
        raise corrupt("deflate stream is incomplete or longer than the section length")
    return out


def _zstd(data: bytes | memoryview, length: int, corrupt: _Corrupt) -> bytes:
    content_size = zstandard.frame_content_size(data)
    if content_size == length:
        return _ZSTD_DECOMPRESSOR.decompress(data)
    if content_size != -1:
        raise corrupt(f"zstd frame content size {content_size} differs from section length {length}")
    # No size in the frame: stream it, stopping one byte past the expected length.
    chunks: list[bytes] = []
    total = 0
    with _ZSTD_DECOMPRESSOR.stream_reader(bytes(data)) as reader:
        while total <= length:
            chunk = reader.read(min(length + 1 - total, _STREAM_CHUNK))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    return b"".join(chunks)
