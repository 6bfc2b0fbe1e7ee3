"""How serialized values are framed: Cassandra's vints and the int32 length prefixes of the elements of
frozen collections, tuples and UDTs (native protocol v4+), read and written.

One module for the framing so that the decoder, the byte-comparable order and the serializer of each
type read and write the same layout.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

_I32 = struct.Struct(">i")
_NULL_SIZE = _I32.pack(-1)


# ---------------------------------------------------------------------------------------------------------
# vints (Cassandra's own format: leading 1-bits of the first byte give the number of extra bytes)


def _extra_bytes(first: int) -> int:
    return 8 - (first ^ 0xFF).bit_length()


#: first byte -> number of bytes following it
VINT_EXTRA = tuple(_extra_bytes(b) for b in range(256))


def read_unsigned_vint(data: bytes, pos: int) -> tuple[int, int]:
    """Read one unsigned vint at ``pos``; return (value, next position). Raises IndexError if cut short."""
    first = data[pos]
    if first < 0x80:
        return first, pos + 1
    extra = VINT_EXTRA[first]
    end = pos + 1 + extra
    if end > len(data):
        raise IndexError("vint runs past the end of the data")
    value = first & (0xFF >> extra) if extra < 8 else 0
    return (value << (8 * extra)) | int.from_bytes(data[pos + 1 : end], "big"), end


def read_signed_vint(data: bytes, pos: int) -> tuple[int, int]:
    """Read one zigzag-encoded signed vint (used by ``duration``)."""
    raw, pos = read_unsigned_vint(data, pos)
    return (raw >> 1) ^ -(raw & 1), pos


def unsigned_vint(n: int) -> bytes:
    """Cassandra's unsigned vint: n bytes carry 7n bits, the leading ones of the first byte count the
    bytes that follow (nine bytes for the full 64 bits)."""
    extra = 0
    while extra < 8 and n >= 1 << (7 * (extra + 1)):
        extra += 1
    if extra == 0:
        return bytes((n,))
    if extra == 8:
        return b"\xff" + n.to_bytes(8, "big")
    body = n.to_bytes(extra + 1, "big")
    return bytes(((0xFF << (8 - extra)) & 0xFF | body[0],)) + body[1:]


# ---------------------------------------------------------------------------------------------------------
# int32-length-prefixed elements (a negative length is a null element)


def read_sized_element(data: bytes, pos: int) -> tuple[bytes | None, int]:
    """One int32-length-prefixed element of a frozen collection/tuple/UDT (negative length = null)."""
    size = _I32.unpack_from(data, pos)[0]
    pos += 4
    if size < 0:
        return None, pos
    end = pos + size
    if end > len(data):
        raise ValueError("element runs past the end of the value")
    return data[pos:end], end


def read_elements(data: bytes) -> list[bytes | None]:
    """The elements of a frozen list or set: an int32 count, then that many sized elements."""
    count = _I32.unpack_from(data, 0)[0]
    if count < 0:
        raise ValueError(f"negative element count {count}")
    pos = 4
    out: list[bytes | None] = []
    for _ in range(count):
        item, pos = read_sized_element(data, pos)
        out.append(item)
    if pos != len(data):
        raise ValueError(f"{len(data) - pos} trailing bytes after {count} elements")
    return out


def read_pairs(data: bytes) -> list[tuple[bytes | None, bytes | None]]:
    """The entries of a frozen map: an int32 count, then sized key and value per entry."""
    count = _I32.unpack_from(data, 0)[0]
    if count < 0:
        raise ValueError(f"negative entry count {count}")
    pos = 4
    out = []
    for _ in range(count):
        key, pos = read_sized_element(data, pos)
        value, pos = read_sized_element(data, pos)
        out.append((key, value))
    if pos != len(data):
        raise ValueError(f"{len(data) - pos} trailing bytes after {count} map entries")
    return out


def read_fields(
    data: bytes, limit: int, what: str, *, too_many: type[ValueError] = ValueError
) -> list[bytes | None]:
    """int32-length-prefixed fields up to the end of the value (a value may hold fewer than declared);
    more than ``limit`` raise ``too_many`` (a clustering's ClusteringValueError, say)."""
    pos = 0
    out: list[bytes | None] = []
    while pos < len(data):
        if len(out) == limit:
            raise too_many(f"{what} value has more than {limit} fields")
        item, pos = read_sized_element(data, pos)
        out.append(item)
    return out


def sized(item: bytes | None) -> bytes:
    """One element with its int32 length prefix (-1 for null)."""
    if item is None:
        return _NULL_SIZE
    return len(item).to_bytes(4, "big") + item


def counted(items: list[bytes]) -> bytes:
    """A frozen list or set: the count, then the sized elements."""
    return len(items).to_bytes(4, "big") + b"".join(sized(i) for i in items)


def counted_pairs(pairs: Iterable[tuple[bytes, bytes]]) -> bytes:
    """A frozen map: the count, then the sized key and value of each entry."""
    pairs = list(pairs)
    return len(pairs).to_bytes(4, "big") + b"".join(sized(k) + sized(v) for k, v in pairs)
