"""Byte-comparable encodings of CQL values: byte strings whose plain unsigned order (memcmp) is the
order Cassandra's comparators give the values.

Each type's ``order_encoder`` is built from these pieces (``cassandra_model.clustering_order`` lays the
encodings of clustering components out as row keys and bounds). Every encoding is prefix-free and
order-preserving for valid, NON-EMPTY values (an empty value sorts first; callers mark it):

- text, ascii, blob, inet, duration, custom types: bytes with 0x00 escaped as 0x00 0xFF, then 0x00 0x00
  (unsigned lexicographic, shorter prefix first);
- tinyint, smallint, int, bigint, timestamp, counter: the sign bit flipped (signed comparison);
- date, time: the fixed bytes (Cassandra compares them as unsigned bytes);
- varint, decimal: by numeric value (``1.0`` and ``1.00`` are EQUAL, as BigDecimal.compareTo says);
- float, double: Java's Double.compare total order (-0.0 < 0.0, every NaN equal and above +Infinity);
- boolean: false < true, any non-zero first byte is true;
- uuid: version first; version 1 by timestamp then unsigned bytes; others unsigned bytes (UUIDType);
- timeuuid: timestamp, then the clock/node bytes compared as SIGNED bytes (TimeUUIDType, CASSANDRA-8730);
- frozen list/set/map: element by element (map: key then value), a shorter one first;
- frozen tuple/UDT: field by field, null first; trailing null fields are ignored (a value written before
  ALTER TYPE ADD equals one with the new field null);
- vector: element by element.

Not exact (documented limits):
- Cassandra's TupleType also ignores trailing EMPTY fields at the end of the longer value but orders an
  empty field after a null one in the middle, which is not a transitive order and has no byte encoding;
  trailing empty fields are compared here as present values. Only tuples with empty (not null) fields
  at their end are affected.
- Values whose bytes do not fit their type (Cassandra validates and never stores them) raise
  ClusteringValueError instead of being ordered like Cassandra's lenient comparators would.
- Custom (Java-class) types are ordered as unsigned bytes, which is right only for byte-ordered ones.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence

from cassandra_model.cql_types.framing import read_fields, read_sized_element, read_unsigned_vint
from cassandra_model.errors import ClusteringValueError

ValueEncoder = Callable[[bytes], bytes]

INVERT = bytes(range(255, -1, -1))
_FLIP = [bytes((b ^ 0x80,)) for b in range(256)]
#: a byte compared signed becomes an unsigned byte with the same order when its top bit is flipped
_SIGNED_BYTES = bytes(b ^ 0x80 for b in range(256))
_I32 = struct.Struct(">i")
_U64 = struct.Struct(">Q")
_U32 = struct.Struct(">I")


# ---------------------------------------------------------------------------------------------------------
# native types


def unsigned_bytes(b: bytes) -> bytes:
    """Unsigned lexicographic order, made prefix-free."""
    return b.replace(b"\x00", b"\x00\xff") + b"\x00\x00"


def signed_fixed(size: int, name: str) -> ValueEncoder:
    def encode(b: bytes) -> bytes:
        if len(b) != size:
            raise ClusteringValueError(f"{name} needs {size} bytes, got {len(b)}")
        return _FLIP[b[0]] + b[1:]

    return encode


def unsigned_fixed(size: int, name: str) -> ValueEncoder:
    def encode(b: bytes) -> bytes:
        if len(b) != size:
            raise ClusteringValueError(f"{name} needs {size} bytes, got {len(b)}")
        return b

    return encode


def _magnitude(value: int) -> bytes:
    return value.to_bytes((value.bit_length() + 7) // 8, "big")


def _integer(value: int) -> bytes:
    """Sign, then length, then magnitude; negatives complemented so larger magnitudes sort lower."""
    if value == 0:
        return b"\x80"
    if value > 0:
        mag = _magnitude(value)
        return b"\x81" + _U32.pack(len(mag)) + mag
    mag = _magnitude(-value)
    return b"\x7f" + _U32.pack(0xFFFFFFFF - len(mag)) + mag.translate(INVERT)


def varint(b: bytes) -> bytes:
    return _integer(int.from_bytes(b, "big", signed=True))


def decimal_value(b: bytes) -> bytes:
    """Sign, decimal exponent, then significant digits: value = 0.d1d2... x 10^exponent."""
    if len(b) < 4:
        raise ClusteringValueError(f"decimal needs at least 4 bytes, got {len(b)}")
    scale = _I32.unpack_from(b)[0]
    unscaled = int.from_bytes(b[4:], "big", signed=True)
    if unscaled == 0:
        return b"\x80"
    text = str(abs(unscaled))
    exponent = len(text) - scale
    body = _U64.pack(exponent + 2**63) + text.rstrip("0").encode("ascii") + b"\x00"
    if unscaled > 0:
        return b"\x81" + body
    return b"\x7f" + body.translate(INVERT)


def floating(size: int, name: str) -> ValueEncoder:
    bits = size * 8
    sign = 1 << (bits - 1)
    mask = (1 << bits) - 1
    exponent_mask = {4: 0x7F800000, 8: 0x7FF0000000000000}[size]
    fraction_mask = {4: 0x007FFFFF, 8: 0x000FFFFFFFFFFFFF}[size]
    canonical_nan = {4: 0x7FC00000, 8: 0x7FF8000000000000}[size]

    def encode(b: bytes) -> bytes:
        if len(b) != size:
            raise ClusteringValueError(f"{name} needs {size} bytes, got {len(b)}")
        value = int.from_bytes(b, "big")
        if value & exponent_mask == exponent_mask and value & fraction_mask:
            value = canonical_nan
        value = value ^ mask if value & sign else value | sign
        return value.to_bytes(size, "big")

    return encode


def boolean(b: bytes) -> bytes:
    return b"\x01" if b[0] else b"\x00"


def uuid_value(b: bytes) -> bytes:
    if len(b) != 16:
        raise ClusteringValueError(f"uuid needs 16 bytes, got {len(b)}")
    version = b[6] >> 4
    if version == 1:
        return bytes((version,)) + b[6:8] + b[4:6] + b[0:4] + b[8:]
    return bytes((version,)) + b


def timeuuid(b: bytes) -> bytes:
    if len(b) != 16:
        raise ClusteringValueError(f"timeuuid needs 16 bytes, got {len(b)}")
    return b[6:8] + b[4:6] + b[0:4] + b[8:].translate(_SIGNED_BYTES)


# ---------------------------------------------------------------------------------------------------------
# nested values (elements of frozen collections, tuple and UDT fields)


def _nested(encode: ValueEncoder) -> Callable[[bytes | None], bytes]:
    """An element inside a frozen value: null < empty < any value, each prefix-free."""

    def nested(b: bytes | None) -> bytes:
        if b is None:
            return b"\x01"
        if not b:
            return b"\x02"
        return b"\x03" + encode(b)

    return nested


def elements(element: ValueEncoder) -> ValueEncoder:
    """A frozen list or set, element by element."""
    nested = _nested(element)

    def encode(b: bytes) -> bytes:
        count = _I32.unpack_from(b)[0]
        pos = 4
        parts = []
        for _ in range(count):
            item, pos = read_sized_element(b, pos)
            parts.append(nested(item))
        parts.append(b"\x00")
        return b"".join(parts)

    return encode


def entries(key: ValueEncoder, value: ValueEncoder) -> ValueEncoder:
    """A frozen map, key then value of each entry."""
    nested_key = _nested(key)
    nested_value = _nested(value)

    def encode(b: bytes) -> bytes:
        count = _I32.unpack_from(b)[0]
        pos = 4
        parts = []
        for _ in range(count):
            k, pos = read_sized_element(b, pos)
            v, pos = read_sized_element(b, pos)
            parts.append(nested_key(k))
            parts.append(nested_value(v))
        parts.append(b"\x00")
        return b"".join(parts)

    return encode


def fields(types: Sequence[ValueEncoder]) -> ValueEncoder:
    """A frozen tuple or UDT, field by field; trailing null fields ignored."""
    nested = [_nested(t) for t in types]

    def encode(b: bytes) -> bytes:
        items = read_fields(b, len(nested), "tuple/UDT", too_many=ClusteringValueError)
        while items and items[-1] is None:
            items.pop()
        parts = [enc(item) for enc, item in zip(nested, items, strict=False)]
        parts.append(b"\x00")
        return b"".join(parts)

    return encode


def vector(element: ValueEncoder, size: int | None, dimension: int) -> ValueEncoder:
    """A vector of ``dimension`` elements, fixed ``size`` bytes each or vint-length-prefixed (None)."""
    nested = _nested(element)

    def encode(b: bytes) -> bytes:
        parts = []
        if size is not None:
            if len(b) != size * dimension:
                raise ClusteringValueError(f"vector needs {size * dimension} bytes, got {len(b)}")
            parts = [nested(b[i : i + size]) for i in range(0, len(b), size)]
        else:
            pos = 0
            for _ in range(dimension):
                length, pos = read_unsigned_vint(b, pos)
                parts.append(nested(b[pos : pos + length]))
                pos += length
        return b"".join(parts)

    return encode


def guarded(encode: ValueEncoder, cql: str) -> ValueEncoder:
    """Bytes that do not fit the type raise ClusteringValueError, whatever the encoder tripped on."""

    def guarded_encode(b: bytes) -> bytes:
        try:
            return encode(b)
        except ClusteringValueError:
            raise
        except (struct.error, IndexError, ValueError) as exc:
            raise ClusteringValueError(f"{len(b)} bytes are not a {cql} value: {exc}") from exc

    return guarded_encode
