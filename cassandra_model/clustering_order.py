"""Cassandra's clustering order as byte strings that sort the same way (a byte-comparable encoding).

Rows of a partition, range-tombstone bounds and collection elements are ordered by the clustering
types' own comparison (``ClusteringComparator``), not by their bytes. Here every clustering key and
every bound becomes one byte string whose plain unsigned byte order (memcmp, Python ``bytes`` order,
RocksDB's default comparator) IS Cassandra's order, so a sorted store keyed by these strings iterates
rows in clustering order and a range deletion is one key range.

Layout of a key: for each clustering column one component, then ``0x20``. A component is ``0x10`` for
null (nulls sort first in both directions, as ``compareComponent`` tests null before the type), or for
an empty value ``0x18`` (ASC) / ``0x28`` (DESC) (every type sorts an empty value first, ReversedType
last), or ``0x20`` followed by the value's encoding (bitwise inverted for DESC, which reverses a
prefix-free order). A bound on a prefix is the prefix's components followed by ``0x08`` ("before every
clustering that starts with the prefix": INCL_START, EXCL_END) or ``0x30`` ("after": EXCL_START,
INCL_END); a bound never equals a key, so containment is a strict comparison.

Value encodings (each prefix-free and order-preserving for valid values):
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

from cassandra_model.cql_types import (
    CqlType,
    CustomType,
    ListType,
    MapType,
    NativeType,
    SetType,
    TupleType,
    UserType,
    VectorType,
    read_sized_element,
    read_unsigned_vint,
)
from cassandra_model.errors import ClusteringValueError
from cassandra_model.table_schema import ClusteringOrder, TableSchema

#: component markers
NULL = b"\x10"
EMPTY_ASC = b"\x18"
VALUE = b"\x20"
EMPTY_DESC = b"\x28"
#: bound suffixes and the terminator of a full key
BEFORE = b"\x08"
ROW_END = b"\x20"
AFTER = b"\x30"

#: ClusteringPrefix.Kind ordinals of range tombstone markers (see cassandra_model.partition_update)
EXCL_END_BOUND = 0
INCL_START_BOUND = 1
EXCL_END_INCL_START_BOUNDARY = 2
INCL_END_EXCL_START_BOUNDARY = 5
INCL_END_BOUND = 6
EXCL_START_BOUND = 7
_BEFORE_KINDS = frozenset((INCL_START_BOUND, EXCL_END_BOUND, EXCL_END_INCL_START_BOUNDARY))
_AFTER_KINDS = frozenset((EXCL_START_BOUND, INCL_END_BOUND, INCL_END_EXCL_START_BOUNDARY))

_INVERT = bytes(range(255, -1, -1))
_FLIP = [bytes((b ^ 0x80,)) for b in range(256)]
_I32 = struct.Struct(">i")
_U64 = struct.Struct(">Q")
_U32 = struct.Struct(">I")

ValueEncoder = Callable[[bytes], bytes]
ComponentEncoder = Callable[[bytes | None], bytes]


# ---------------------------------------------------------------------------------------------------------
# native types


def _enc_bytes(b: bytes) -> bytes:
    return b.replace(b"\x00", b"\x00\xff") + b"\x00\x00"


def _signed_fixed(size: int, name: str) -> ValueEncoder:
    def encode(b: bytes) -> bytes:
        if len(b) != size:
            raise ClusteringValueError(f"{name} needs {size} bytes, got {len(b)}")
        return _FLIP[b[0]] + b[1:]

    return encode


def _unsigned_fixed(size: int, name: str) -> ValueEncoder:
    def encode(b: bytes) -> bytes:
        if len(b) != size:
            raise ClusteringValueError(f"{name} needs {size} bytes, got {len(b)}")
        return b

    return encode


def _magnitude(value: int) -> bytes:
    return value.to_bytes((value.bit_length() + 7) // 8, "big")


def _enc_integer(value: int) -> bytes:
    """Sign, then length, then magnitude; negatives complemented so larger magnitudes sort lower."""
    if value == 0:
        return b"\x80"
    if value > 0:
        mag = _magnitude(value)
        return b"\x81" + _U32.pack(len(mag)) + mag
    mag = _magnitude(-value)
    return b"\x7f" + _U32.pack(0xFFFFFFFF - len(mag)) + mag.translate(_INVERT)


def _enc_varint(b: bytes) -> bytes:
    return _enc_integer(int.from_bytes(b, "big", signed=True))


def _enc_decimal(b: bytes) -> bytes:
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
    return b"\x7f" + body.translate(_INVERT)


def _float_encoder(size: int, name: str) -> ValueEncoder:
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


def _enc_boolean(b: bytes) -> bytes:
    return b"\x01" if b[0] else b"\x00"


def _enc_uuid(b: bytes) -> bytes:
    if len(b) != 16:
        raise ClusteringValueError(f"uuid needs 16 bytes, got {len(b)}")
    version = b[6] >> 4
    if version == 1:
        return bytes((version,)) + b[6:8] + b[4:6] + b[0:4] + b[8:]
    return bytes((version,)) + b


def _enc_timeuuid(b: bytes) -> bytes:
    if len(b) != 16:
        raise ClusteringValueError(f"timeuuid needs 16 bytes, got {len(b)}")
    return b[6:8] + b[4:6] + b[0:4] + b[8:].translate(_SIGNED_BYTES)


#: a byte compared signed becomes an unsigned byte with the same order when its top bit is flipped
_SIGNED_BYTES = bytes(b ^ 0x80 for b in range(256))

_NATIVE: dict[str, ValueEncoder] = {
    "ascii": _enc_bytes,
    "text": _enc_bytes,
    "blob": _enc_bytes,
    "inet": _enc_bytes,
    "duration": _enc_bytes,
    "empty": _enc_bytes,
    "boolean": _enc_boolean,
    "tinyint": _signed_fixed(1, "tinyint"),
    "smallint": _signed_fixed(2, "smallint"),
    "int": _signed_fixed(4, "int"),
    "bigint": _signed_fixed(8, "bigint"),
    "counter": _signed_fixed(8, "counter"),
    "timestamp": _signed_fixed(8, "timestamp"),
    "date": _unsigned_fixed(4, "date"),
    "time": _unsigned_fixed(8, "time"),
    "varint": _enc_varint,
    "decimal": _enc_decimal,
    "float": _float_encoder(4, "float"),
    "double": _float_encoder(8, "double"),
    "uuid": _enc_uuid,
    "timeuuid": _enc_timeuuid,
}
#: types for which two values compare equal only when their bytes are equal
_BYTE_IDENTICAL = frozenset(_NATIVE) - {"varint", "decimal", "float", "double", "boolean"}


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


def _collection_encoder(element: CqlType) -> ValueEncoder:
    nested = _nested(value_encoder(element))

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


def _map_encoder(key: CqlType, value: CqlType) -> ValueEncoder:
    nested_key = _nested(value_encoder(key))
    nested_value = _nested(value_encoder(value))

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


def _fields_encoder(types: Sequence[CqlType]) -> ValueEncoder:
    nested = [_nested(value_encoder(t)) for t in types]

    def encode(b: bytes) -> bytes:
        pos = 0
        fields: list[bytes | None] = []
        while pos < len(b):
            if len(fields) == len(nested):
                raise ClusteringValueError(f"tuple/UDT value has more than {len(nested)} fields")
            item, pos = read_sized_element(b, pos)
            fields.append(item)
        while fields and fields[-1] is None:
            fields.pop()
        parts = [enc(item) for enc, item in zip(nested, fields, strict=False)]
        parts.append(b"\x00")
        return b"".join(parts)

    return encode


def _vector_encoder(element: CqlType, dimension: int) -> ValueEncoder:
    nested = _nested(value_encoder(element))
    size = element.fixed_length

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


def _guarded(encode: ValueEncoder, t: CqlType) -> ValueEncoder:
    def guarded(b: bytes) -> bytes:
        try:
            return encode(b)
        except ClusteringValueError:
            raise
        except (struct.error, IndexError, ValueError) as exc:
            raise ClusteringValueError(f"{len(b)} bytes are not a {t.cql()} value: {exc}") from exc

    return guarded


_ENCODERS: dict[int, tuple[CqlType, ValueEncoder]] = {}


def value_encoder(t: CqlType) -> ValueEncoder:
    """The order-preserving, prefix-free encoding of a NON-EMPTY value of type ``t`` (ascending)."""
    found = _ENCODERS.get(id(t))
    if found is not None and found[0] is t:
        return found[1]
    encode: ValueEncoder
    if isinstance(t, NativeType):
        encode = _NATIVE[t.name]
    elif isinstance(t, ListType | SetType):
        encode = _collection_encoder(t.element)
    elif isinstance(t, MapType):
        encode = _map_encoder(t.key, t.value)
    elif isinstance(t, TupleType):
        encode = _fields_encoder(t.elements)
    elif isinstance(t, UserType):
        encode = _fields_encoder(t.field_types)
    elif isinstance(t, VectorType):
        encode = _vector_encoder(t.element, t.dimension)
    else:  # CustomType and anything unknown: unsigned bytes
        encode = _enc_bytes
    encode = _guarded(encode, t)
    if len(_ENCODERS) > 4096:  # schema reloads make new type objects; keep the cache bounded
        _ENCODERS.clear()
    _ENCODERS[id(t)] = (t, encode)
    return encode


def component_encoder(t: CqlType, descending: bool = False) -> ComponentEncoder:
    """One clustering component: null, empty or a value, in ASC or DESC (ReversedType) order."""
    encode = value_encoder(t)
    if descending:

        def component_desc(v: bytes | None) -> bytes:
            if v is None:
                return NULL
            if not v:
                return EMPTY_DESC
            return VALUE + encode(v).translate(_INVERT)

        return component_desc

    def component(v: bytes | None) -> bytes:
        if v is None:
            return NULL
        if not v:
            return EMPTY_ASC
        return VALUE + encode(v)

    return component


def compare_values(t: CqlType, a: bytes | None, b: bytes | None, descending: bool = False) -> int:
    """Compare two serialized values of ``t`` as a clustering column of that order would (-1, 0, 1)."""
    encode = component_encoder(t, descending)
    ka, kb = encode(a), encode(b)
    return (ka > kb) - (ka < kb)


def is_byte_identical(t: CqlType) -> bool:
    """True when two values of ``t`` compare equal only if their bytes are equal."""
    if isinstance(t, NativeType):
        return t.name in _BYTE_IDENTICAL
    if isinstance(t, ListType | SetType):
        return is_byte_identical(t.element)
    if isinstance(t, MapType):
        return is_byte_identical(t.key) and is_byte_identical(t.value)
    if isinstance(t, VectorType):
        return is_byte_identical(t.element)
    # tuples and UDTs are not: trailing null fields make different bytes compare equal
    return isinstance(t, CustomType)


# ---------------------------------------------------------------------------------------------------------
# clustering keys and bounds


class ClusteringKeyOrder:
    """Keys and bound positions for one table's clustering columns (types and ASC/DESC)."""

    __slots__ = ("_components", "size")

    def __init__(self, columns: Sequence[tuple[CqlType, bool]]) -> None:
        self._components = tuple(component_encoder(t, desc) for t, desc in columns)
        self.size = len(self._components)

    @classmethod
    def for_table(cls, schema: TableSchema) -> ClusteringKeyOrder:
        return cls([(c.type, c.clustering_order == ClusteringOrder.DESC) for c in schema.clustering])

    def _prefix(self, values: Sequence[bytes | None]) -> bytes:
        if len(values) > self.size:
            raise ClusteringValueError(f"{len(values)} clustering values for {self.size} clustering columns")
        return b"".join([enc(v) for enc, v in zip(self._components, values, strict=False)])

    def key(self, clustering: Sequence[bytes | None]) -> bytes:
        """The byte-comparable key of a row's full clustering."""
        if len(clustering) != self.size:
            raise ClusteringValueError(
                f"a row has {len(clustering)} clustering values, the table {self.size} clustering columns"
            )
        if self.size == 1:
            return self._components[0](clustering[0]) + ROW_END
        return self._prefix(clustering) + ROW_END

    def bound(self, kind: int, prefix: Sequence[bytes | None]) -> bytes:
        """The position of a range-tombstone bound (ClusteringPrefix.Kind ordinal) on a prefix.

        An empty prefix with a start kind is the bottom, with an end kind the top of the partition.
        """
        if kind in _BEFORE_KINDS:
            return self._prefix(prefix) + BEFORE
        if kind in _AFTER_KINDS:
            return self._prefix(prefix) + AFTER
        raise ClusteringValueError(f"{kind} is not a range tombstone bound kind")

    def compare(self, a: Sequence[bytes | None], b: Sequence[bytes | None]) -> int:
        """Compare two full clusterings (-1, 0, 1)."""
        ka, kb = self.key(a), self.key(b)
        return (ka > kb) - (ka < kb)

    def in_range(
        self,
        clustering: Sequence[bytes | None],
        start_kind: int,
        start: Sequence[bytes | None],
        end_kind: int,
        end: Sequence[bytes | None],
    ) -> bool:
        """Whether a range deletion between those two bounds covers the row at ``clustering``."""
        return self.bound(start_kind, start) < self.key(clustering) < self.bound(end_kind, end)
