"""CQL types: parse type strings, know their commit-log layout, decode their serialized values.

Why our own: cassandra-driver parses Java class names only (not ``map<text, int>``), and the mutation
decoder needs two facts per type that the driver does not expose: whether a column is multi-cell (written
as one cell per element, with a path) and whether its value is written without a length prefix in the
commit log (format notes §7.10, §7.12). Values use the native-protocol v4+ serialization.

Decoded Python values: text/ascii -> str, blob/custom -> bytes, integers/counter -> int, float/double ->
float, decimal -> Decimal, date -> datetime.date (int days since 1970 when out of Python's range), time ->
CqlTime, timestamp -> aware UTC datetime (int ms when out of range), uuid/timeuuid -> UUID, inet ->
ipaddress, duration -> Duration, list/set/vector -> list (sets keep Cassandra's element order), map -> dict
(a list of (key, value) tuples when the key type is not hashable), tuple -> tuple, UDT -> dict by field
name. An empty value of a type for which "empty" is not a value (numbers, uuids, collections...) -> None.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import ipaddress
import json
import math
import re
import struct
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from cassandra_model.errors import SchemaError, ValueDecodeError

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_F32 = struct.Struct(">f")
_F64 = struct.Struct(">d")

_EPOCH_DT = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
_EPOCH_ORDINAL = _dt.date(1970, 1, 1).toordinal()
_NANOS_PER_DAY = 86_400 * 1_000_000_000
_DECIMAL_CONTEXT = decimal.Context(prec=decimal.MAX_PREC, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)
_DECODE_ERRORS = (struct.error, ValueError, IndexError, UnicodeDecodeError, OverflowError, TypeError)


# ---------------------------------------------------------------------------------------------------------
# value classes


@dataclass(frozen=True, slots=True, order=True)
class CqlTime:
    """A CQL ``time``: nanoseconds since midnight (datetime.time would lose the last three digits)."""

    nanoseconds: int

    def isoformat(self) -> str:
        seconds, nanos = divmod(self.nanoseconds, 1_000_000_000)
        minutes, second = divmod(seconds, 60)
        hour, minute = divmod(minutes, 60)
        return f"{hour:02d}:{minute:02d}:{second:02d}.{nanos:09d}"

    def to_time(self) -> _dt.time:
        """The nearest datetime.time, truncated to microseconds."""
        micros = self.nanoseconds // 1000
        seconds, micro = divmod(micros, 1_000_000)
        minutes, second = divmod(seconds, 60)
        hour, minute = divmod(minutes, 60)
        return _dt.time(hour, minute, second, micro)


@dataclass(frozen=True, slots=True)
class Duration:
    """A CQL ``duration``: three independent signed components, as Cassandra stores them."""

    months: int
    days: int
    nanoseconds: int


@dataclass(frozen=True, slots=True)
class CounterShard:
    """One shard of a CounterContext: the node's counter id, its logical clock and its running count."""

    counter_id: uuid.UUID
    clock: int
    count: int


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


# ---------------------------------------------------------------------------------------------------------
# the type model


class UdtResolver(Protocol):
    """Finds a user-defined type by keyspace and name (see table_schema.UdtRegistry)."""

    def resolve_udt(self, keyspace: str | None, name: str) -> UserType: ...


class CqlType:
    """Base of every CQL type.

    ``fixed_length`` is the commit-log value length when values are written without a length prefix
    (None when variable); ``multi_cell`` is True for non-frozen collections and UDTs (complex columns).
    """

    __slots__ = ("empty_ok", "fixed_length", "hashable", "multi_cell")

    def __init__(self, fixed_length: int | None, multi_cell: bool, *, empty_ok: bool, hashable: bool) -> None:
        self.fixed_length = fixed_length
        self.multi_cell = multi_cell
        self.empty_ok = empty_ok
        self.hashable = hashable

    # -- description

    def cql(self) -> str:
        """The type as system_schema.columns.type spells it."""
        raise NotImplementedError

    def freeze(self) -> CqlType:
        """The frozen (single-cell) form of this type."""
        return self

    @property
    def is_collection(self) -> bool:
        return False

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CqlType) and type(other) is type(self) and other.cql() == self.cql()

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.cql()))

    def __repr__(self) -> str:
        return f"<CqlType {self.cql()}>"

    # -- values

    def decode(self, data: bytes | bytearray | memoryview) -> Any:
        """Decode one serialized value; ValueDecodeError if the bytes do not fit the type."""
        if not isinstance(data, bytes):
            data = bytes(data)
        if not data and not self.empty_ok:
            return None
        try:
            return self._decode(data)
        except ValueDecodeError:
            raise
        except _DECODE_ERRORS as exc:
            raise ValueDecodeError(f"cannot decode {len(data)} bytes as {self.cql()}: {exc}") from exc

    def _decode(self, data: bytes) -> Any:
        raise NotImplementedError

    # -- multi-cell (complex) columns: one cell per element, identified by its path

    def decode_path(self, path: bytes) -> Any:
        """The element key a cell path stands for (list: timeuuid, set: element, map: key, UDT: field)."""
        raise ValueDecodeError(f"{self.cql()} is not multi-cell; its cells have no path")

    def decode_cell_value(self, path: bytes, value: bytes) -> Any:
        """The element value a complex cell holds (None for sets, whose element is the path)."""
        raise ValueDecodeError(f"{self.cql()} is not multi-cell; its cells have no path")

    def assemble(self, cells: Iterable[tuple[bytes, bytes]]) -> Any:
        """The whole value of a multi-cell column from its (path, value) cells in path order."""
        raise ValueDecodeError(f"{self.cql()} is not multi-cell")

    def _wrap_cell(self, fn: Any, *args: bytes) -> Any:
        try:
            return fn(*args)
        except ValueDecodeError:
            raise
        except _DECODE_ERRORS as exc:
            raise ValueDecodeError(f"cannot decode a cell of {self.cql()}: {exc}") from exc


def _value(t: CqlType, data: bytes) -> Any:
    """Decode a nested value without the public error wrapping (the outermost decode wraps)."""
    if not data and not t.empty_ok:
        return None
    return t._decode(data)


def _exact(data: bytes, size: int, name: str) -> None:
    if len(data) != size:
        raise ValueError(f"{name} needs {size} bytes, got {len(data)}")


# -- native decoders


def _dec_ascii(b: bytes) -> str:
    return b.decode("ascii")


def _dec_text(b: bytes) -> str:
    return b.decode("utf-8")


def _dec_blob(b: bytes) -> bytes:
    return b


def _dec_boolean(b: bytes) -> bool:
    _exact(b, 1, "boolean")
    return b[0] != 0


def _dec_tinyint(b: bytes) -> int:
    _exact(b, 1, "tinyint")
    return b[0] - 256 if b[0] > 127 else b[0]


def _dec_smallint(b: bytes) -> int:
    return _I16.unpack(b)[0]


def _dec_int(b: bytes) -> int:
    return _I32.unpack(b)[0]


def _dec_bigint(b: bytes) -> int:
    return _I64.unpack(b)[0]


def _dec_varint(b: bytes) -> int:
    return int.from_bytes(b, "big", signed=True)


def _dec_float(b: bytes) -> float:
    return _F32.unpack(b)[0]


def _dec_double(b: bytes) -> float:
    return _F64.unpack(b)[0]


def _dec_decimal(b: bytes) -> decimal.Decimal:
    if len(b) < 5:
        raise ValueError(f"decimal needs at least 5 bytes, got {len(b)}")
    scale = _I32.unpack_from(b)[0]
    unscaled = int.from_bytes(b[4:], "big", signed=True)
    return decimal.Decimal(unscaled).scaleb(-scale, _DECIMAL_CONTEXT)


def _dec_date(b: bytes) -> _dt.date | int:
    days = _U32.unpack(b)[0] - 2**31
    try:
        return _dt.date.fromordinal(_EPOCH_ORDINAL + days)
    except (ValueError, OverflowError):
        return days


def _dec_time(b: bytes) -> CqlTime:
    nanos = _I64.unpack(b)[0]
    if not 0 <= nanos < _NANOS_PER_DAY:
        raise ValueError(f"time {nanos} ns is outside one day")
    return CqlTime(nanos)


def _dec_timestamp(b: bytes) -> _dt.datetime | int:
    millis = _I64.unpack(b)[0]
    try:
        return _EPOCH_DT + _dt.timedelta(milliseconds=millis)
    except OverflowError:
        return millis


def _dec_uuid(b: bytes) -> uuid.UUID:
    return uuid.UUID(bytes=b)


def _dec_inet(b: bytes) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    if len(b) not in (4, 16):
        raise ValueError(f"inet needs 4 or 16 bytes, got {len(b)}")
    return ipaddress.ip_address(b)


def _dec_duration(b: bytes) -> Duration:
    months, pos = read_signed_vint(b, 0)
    days, pos = read_signed_vint(b, pos)
    nanos, pos = read_signed_vint(b, pos)
    if pos != len(b):
        raise ValueError("trailing bytes after duration")
    return Duration(months, days, nanos)


def counter_shards(b: bytes) -> list[CounterShard]:
    """The shards of a serialized CounterContext (§7.13): int16 header count, header, 32-byte shards."""
    if len(b) < 2:
        raise ValueError("counter context shorter than its header")
    start = 2 + 2 * abs(_I16.unpack_from(b)[0])
    if start > len(b) or (len(b) - start) % 32:
        raise ValueError(f"{len(b)} bytes are not a counter context")
    shards = []
    for pos in range(start, len(b), 32):
        clock, count = struct.unpack_from(">qq", b, pos + 16)
        shards.append(CounterShard(uuid.UUID(bytes=b[pos : pos + 16]), clock, count))
    return shards


def _dec_counter(b: bytes) -> int:
    """A counter cell's value: the sum of its shard counts (a plain 8-byte bigint is accepted too)."""
    start = 2 + 2 * abs(_I16.unpack_from(b)[0]) if len(b) >= 2 else 1
    if len(b) == 8 and (start > 8 or (8 - start) % 32):
        return _I64.unpack(b)[0]
    total = sum(shard.count for shard in counter_shards(b))
    return ((total + 2**63) % 2**64) - 2**63


def _dec_empty(b: bytes) -> None:
    if b:
        raise ValueError("EmptyType holds no bytes")
    return None


# name -> (commit-log fixed length or None, decoder, empty is a value)
_NATIVES: dict[str, tuple[int | None, Any, bool]] = {
    "ascii": (None, _dec_ascii, True),
    "text": (None, _dec_text, True),
    "blob": (None, _dec_blob, True),
    "boolean": (1, _dec_boolean, False),
    "tinyint": (None, _dec_tinyint, False),
    "smallint": (None, _dec_smallint, False),
    "int": (4, _dec_int, False),
    "bigint": (8, _dec_bigint, False),
    "varint": (None, _dec_varint, False),
    "float": (4, _dec_float, False),
    "double": (8, _dec_double, False),
    "decimal": (None, _dec_decimal, False),
    "date": (None, _dec_date, False),
    "time": (None, _dec_time, False),
    "timestamp": (8, _dec_timestamp, False),
    "uuid": (16, _dec_uuid, False),
    "timeuuid": (16, _dec_uuid, False),
    "inet": (None, _dec_inet, False),
    "duration": (None, _dec_duration, False),
    "counter": (None, _dec_counter, False),
    "empty": (0, _dec_empty, True),
}
_ALIASES = {"varchar": "text"}


class NativeType(CqlType):
    """A built-in scalar type (``int``, ``text``, ``counter`` ...)."""

    __slots__ = ("_fn", "name")

    def __init__(self, name: str) -> None:
        fixed, fn, empty_ok = _NATIVES[name]
        super().__init__(fixed, False, empty_ok=empty_ok, hashable=True)
        self.name = name
        self._fn = fn

    def cql(self) -> str:
        return self.name

    def _decode(self, data: bytes) -> Any:
        return self._fn(data)


NATIVE_TYPES: dict[str, NativeType] = {name: NativeType(name) for name in _NATIVES}
for _alias, _target in _ALIASES.items():
    NATIVE_TYPES[_alias] = NATIVE_TYPES[_target]

# Java marshal class short names (as they appear in quoted custom types) that have a native equivalent.
_MARSHAL_NATIVES = {
    "AsciiType": "ascii",
    "UTF8Type": "text",
    "BytesType": "blob",
    "BooleanType": "boolean",
    "ByteType": "tinyint",
    "ShortType": "smallint",
    "Int32Type": "int",
    "LongType": "bigint",
    "IntegerType": "varint",
    "FloatType": "float",
    "DoubleType": "double",
    "DecimalType": "decimal",
    "SimpleDateType": "date",
    "TimeType": "time",
    "TimestampType": "timestamp",
    "DateType": "timestamp",
    "UUIDType": "uuid",
    "LexicalUUIDType": "uuid",
    "TimeUUIDType": "timeuuid",
    "InetAddressType": "inet",
    "DurationType": "duration",
    "CounterColumnType": "counter",
    "EmptyType": "empty",
}


class CustomType(CqlType):
    """A quoted Java class we cannot interpret: values stay opaque bytes, written with a length prefix.

    Variable length is right for any AbstractType that does not override valueLengthIfFixed, which is
    the case for custom types in practice.
    """

    __slots__ = ("class_name",)

    def __init__(self, class_name: str) -> None:
        super().__init__(None, False, empty_ok=True, hashable=True)
        self.class_name = class_name

    def cql(self) -> str:
        return "'" + self.class_name.replace("'", "''") + "'"

    def _decode(self, data: bytes) -> bytes:
        return data


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


def _elements(data: bytes) -> list[bytes | None]:
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


def _nullable(t: CqlType, item: bytes | None) -> Any:
    return None if item is None else _value(t, item)


class _ElementCollection(CqlType):
    """A collection of one element type (list, set): same construction, freezing, spelling, frozen form."""

    __slots__ = ("element",)
    keyword = ""

    def __init__(self, element: CqlType, *, frozen: bool) -> None:
        super().__init__(None, not frozen, empty_ok=False, hashable=False)
        self.element = element.freeze()

    @property
    def is_collection(self) -> bool:
        return True

    def freeze(self) -> _ElementCollection:
        return self if not self.multi_cell else type(self)(self.element, frozen=True)

    def cql(self) -> str:
        inner = f"{self.keyword}<{self.element.cql()}>"
        return inner if self.multi_cell else f"frozen<{inner}>"

    def _decode(self, data: bytes) -> list[Any]:
        return [_nullable(self.element, item) for item in _elements(data)]


class ListType(_ElementCollection):
    """``list<T>``; multi-cell unless frozen. Cell path = the element's timeuuid position key."""

    __slots__ = ()
    keyword = "list"

    def decode_path(self, path: bytes) -> uuid.UUID:
        return self._wrap_cell(_dec_uuid, path)

    def decode_cell_value(self, path: bytes, value: bytes) -> Any:
        return self._wrap_cell(_value, self.element, value)

    def assemble(self, cells: Iterable[tuple[bytes, bytes]]) -> list[Any]:
        return [self.decode_cell_value(path, value) for path, value in cells]


class SetType(_ElementCollection):
    """``set<T>``; multi-cell unless frozen. Cell path = the element itself, the cell value is empty."""

    __slots__ = ()
    keyword = "set"

    def decode_path(self, path: bytes) -> Any:
        return self._wrap_cell(_value, self.element, path)

    def decode_cell_value(self, path: bytes, value: bytes) -> None:
        return None

    def assemble(self, cells: Iterable[tuple[bytes, bytes]]) -> list[Any]:
        return [self.decode_path(path) for path, _ in cells]


class MapType(CqlType):
    """``map<K, V>``; multi-cell unless frozen. Cell path = the key, cell value = the value."""

    __slots__ = ("key", "value")

    def __init__(self, key: CqlType, value: CqlType, *, frozen: bool) -> None:
        super().__init__(None, not frozen, empty_ok=False, hashable=False)
        self.key = key.freeze()
        self.value = value.freeze()

    @property
    def is_collection(self) -> bool:
        return True

    def freeze(self) -> MapType:
        return self if not self.multi_cell else MapType(self.key, self.value, frozen=True)

    def cql(self) -> str:
        inner = f"map<{self.key.cql()}, {self.value.cql()}>"
        return inner if self.multi_cell else f"frozen<{inner}>"

    def _pairs(self, pairs: Iterable[tuple[Any, Any]]) -> dict[Any, Any] | list[tuple[Any, Any]]:
        return dict(pairs) if self.key.hashable else list(pairs)

    def _decode(self, data: bytes) -> dict[Any, Any] | list[tuple[Any, Any]]:
        items = _elements_pairs(data)
        return self._pairs((_nullable(self.key, k), _nullable(self.value, v)) for k, v in items)

    def decode_path(self, path: bytes) -> Any:
        return self._wrap_cell(_value, self.key, path)

    def decode_cell_value(self, path: bytes, value: bytes) -> Any:
        return self._wrap_cell(_value, self.value, value)

    def assemble(self, cells: Iterable[tuple[bytes, bytes]]) -> dict[Any, Any] | list[tuple[Any, Any]]:
        return self._pairs((self.decode_path(p), self.decode_cell_value(p, v)) for p, v in cells)


def _elements_pairs(data: bytes) -> list[tuple[bytes | None, bytes | None]]:
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


def _fields(data: bytes, limit: int, what: str) -> list[bytes | None]:
    """int32-length-prefixed fields up to the end of the value (a value may hold fewer than declared)."""
    pos = 0
    out: list[bytes | None] = []
    while pos < len(data):
        if len(out) == limit:
            raise ValueError(f"{what} value has more than {limit} fields")
        item, pos = read_sized_element(data, pos)
        out.append(item)
    return out


class TupleType(CqlType):
    """``tuple<A, B, ...>``; frozen, except the multi-cell tuples Cassandra keeps for dropped UDT columns."""

    __slots__ = ("elements",)

    def __init__(self, elements: tuple[CqlType, ...], *, multi_cell: bool = False) -> None:
        hashable = all(e.hashable for e in elements)
        super().__init__(None, multi_cell, empty_ok=False, hashable=hashable and not multi_cell)
        self.elements = tuple(e.freeze() for e in elements)

    def freeze(self) -> TupleType:
        return self if not self.multi_cell else TupleType(self.elements)

    def cql(self) -> str:
        inner = "tuple<" + ", ".join(e.cql() for e in self.elements) + ">"
        return inner if self.multi_cell else f"frozen<{inner}>"

    def _decode(self, data: bytes) -> tuple[Any, ...]:
        items = _fields(data, len(self.elements), "tuple")
        items += [None] * (len(self.elements) - len(items))
        return tuple(_nullable(t, item) for t, item in zip(self.elements, items, strict=True))

    def decode_path(self, path: bytes) -> int:
        return self._wrap_cell(_field_index, path, len(self.elements))

    def decode_cell_value(self, path: bytes, value: bytes) -> Any:
        index = self.decode_path(path)
        return self._wrap_cell(_value, self.elements[index], value)

    def assemble(self, cells: Iterable[tuple[bytes, bytes]]) -> tuple[Any, ...]:
        out: list[Any] = [None] * len(self.elements)
        for path, value in cells:
            out[self.decode_path(path)] = self.decode_cell_value(path, value)
        return tuple(out)


def _field_index(path: bytes, count: int) -> int:
    _exact(path, 2, "field index path")
    index = int.from_bytes(path, "big")
    if index >= count:
        raise ValueError(f"field index {index} beyond the {count} known fields")
    return index


class UserType(CqlType):
    """A user-defined type. Non-frozen UDT cells carry the field index as a 2-byte path."""

    __slots__ = ("field_names", "field_types", "keyspace", "name")

    def __init__(
        self,
        keyspace: str,
        name: str,
        field_names: tuple[str, ...],
        field_types: tuple[CqlType, ...],
        *,
        frozen: bool,
    ) -> None:
        if len(field_names) != len(field_types):
            raise SchemaError(f"type {keyspace}.{name}: {len(field_names)} names, {len(field_types)} types")
        super().__init__(None, not frozen, empty_ok=False, hashable=False)
        self.keyspace = keyspace
        self.name = name
        self.field_names = tuple(field_names)
        self.field_types = tuple(t.freeze() for t in field_types)

    def freeze(self) -> UserType:
        if not self.multi_cell:
            return self
        return UserType(self.keyspace, self.name, self.field_names, self.field_types, frozen=True)

    def cql(self) -> str:
        name = _quote_ident(self.name)
        return name if self.multi_cell else f"frozen<{name}>"

    def _decode(self, data: bytes) -> dict[str, Any]:
        items = _fields(data, len(self.field_types), f"type {self.name}")
        items += [None] * (len(self.field_types) - len(items))
        return {
            n: _nullable(t, item)
            for n, t, item in zip(self.field_names, self.field_types, items, strict=True)
        }

    def decode_path(self, path: bytes) -> str:
        return self.field_names[self._wrap_cell(_field_index, path, len(self.field_types))]

    def decode_cell_value(self, path: bytes, value: bytes) -> Any:
        index = self._wrap_cell(_field_index, path, len(self.field_types))
        return self._wrap_cell(_value, self.field_types[index], value)

    def assemble(self, cells: Iterable[tuple[bytes, bytes]]) -> dict[str, Any]:
        out: dict[str, Any] = dict.fromkeys(self.field_names)
        for path, value in cells:
            out[self.decode_path(path)] = self.decode_cell_value(path, value)
        return out


class VectorType(CqlType):
    """``vector<T, n>`` (5.0): fixed length when T is; variable elements carry a vint length each."""

    __slots__ = ("dimension", "element")

    def __init__(self, element: CqlType, dimension: int) -> None:
        element = element.freeze()
        if dimension <= 0:
            raise SchemaError(f"vector dimension must be positive, got {dimension}")
        fixed = element.fixed_length * dimension if element.fixed_length is not None else None
        super().__init__(fixed, False, empty_ok=False, hashable=False)
        self.element = element
        self.dimension = dimension

    def cql(self) -> str:
        return f"vector<{self.element.cql()}, {self.dimension}>"

    def _decode(self, data: bytes) -> list[Any]:
        size = self.element.fixed_length
        if size is not None:
            _exact(data, size * self.dimension, self.cql())
            return [_value(self.element, data[i : i + size]) for i in range(0, len(data), size)]
        out = []
        pos = 0
        for _ in range(self.dimension):
            length, pos = read_unsigned_vint(data, pos)
            end = pos + length
            if end > len(data):
                raise ValueError("vector element runs past the end of the value")
            out.append(_value(self.element, data[pos:end]))
            pos = end
        if pos != len(data):
            raise ValueError(f"{len(data) - pos} trailing bytes after the vector")
        return out


# ---------------------------------------------------------------------------------------------------------
# parsing type strings

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
      | "(?P<qident>(?:[^"]|"")*)"
      | '(?P<string>(?:[^']|'')*)'
      | (?P<num>\d+)
      | (?P<sym>[<>,.])
    )""",
    re.VERBOSE,
)
_IDENT_SAFE = re.compile(r"[a-z_][a-z0-9_]*\Z")


def _quote_ident(name: str) -> str:
    return name if _IDENT_SAFE.match(name) else '"' + name.replace('"', '""') + '"'


def _tokenize(text: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            raise SchemaError(f"cannot parse CQL type {text!r} at character {pos}")
        kind = match.lastgroup or ""
        value = match.group(kind)
        if kind == "qident":
            value = value.replace('""', '"')
        elif kind == "string":
            value = value.replace("''", "'")
        tokens.append((kind, value))
        pos = match.end()
    return tokens


class _TypeParser:
    def __init__(
        self, text: str, keyspace: str | None, udts: UdtResolver | None, multi_cell_tuples: bool
    ) -> None:
        self.text = text
        self.tokens = _tokenize(text)
        self.index = 0
        self.keyspace = keyspace
        self.udts = udts
        self.multi_cell_tuples = multi_cell_tuples

    def fail(self, why: str) -> SchemaError:
        return SchemaError(f"cannot parse CQL type {self.text!r}: {why}")

    def next(self) -> tuple[str, str]:
        if self.index >= len(self.tokens):
            raise self.fail("unexpected end")
        token = self.tokens[self.index]
        self.index += 1
        return token

    def expect(self, symbol: str) -> None:
        kind, value = self.next()
        if kind != "sym" or value != symbol:
            raise self.fail(f"expected {symbol!r}, found {value!r}")

    def peek_symbol(self, symbol: str) -> bool:
        return (
            self.index < len(self.tokens)
            and self.tokens[self.index][0] == "sym"
            and self.tokens[self.index][1] == symbol
        )

    def parse(self) -> CqlType:
        result = self.parse_type()
        if self.index != len(self.tokens):
            raise self.fail(f"unexpected {self.tokens[self.index][1]!r}")
        return result

    def parse_type(self) -> CqlType:
        kind, value = self.next()
        if kind == "string":
            return _custom_type(value)
        if kind == "qident":
            return self.user_type(None, value)
        if kind != "ident":
            raise self.fail(f"unexpected {value!r}")
        lowered = value.lower()
        if lowered in NATIVE_TYPES and lowered != "empty" and not self.peek_symbol("<"):
            return NATIVE_TYPES[lowered]
        if lowered == "frozen":
            self.expect("<")
            inner = self.parse_type()
            self.expect(">")
            return inner.freeze()
        if lowered in ("list", "set"):
            self.expect("<")
            element = self.parse_type()
            self.expect(">")
            cls = ListType if lowered == "list" else SetType
            return cls(element, frozen=False)
        if lowered == "map":
            self.expect("<")
            key = self.parse_type()
            self.expect(",")
            val = self.parse_type()
            self.expect(">")
            return MapType(key, val, frozen=False)
        if lowered == "tuple":
            self.expect("<")
            elements = [self.parse_type()]
            while self.peek_symbol(","):
                self.index += 1
                elements.append(self.parse_type())
            self.expect(">")
            return TupleType(tuple(elements), multi_cell=self.multi_cell_tuples)
        if lowered == "vector":
            self.expect("<")
            element = self.parse_type()
            self.expect(",")
            kind, size = self.next()
            if kind != "num":
                raise self.fail(f"vector dimension must be a number, found {size!r}")
            self.expect(">")
            return VectorType(element, int(size))
        if self.peek_symbol("."):
            self.index += 1
            kind2, name = self.next()
            if kind2 not in ("ident", "qident"):
                raise self.fail(f"expected a type name after {value}.")
            keyspace = value if kind == "qident" else value.lower()
            return self.user_type(keyspace, name if kind2 == "qident" else name.lower())
        return self.user_type(None, lowered)

    def user_type(self, keyspace: str | None, name: str) -> UserType:
        keyspace = keyspace or self.keyspace
        if self.udts is None:
            raise self.fail(f"unknown type {name!r} (no user types are defined for keyspace {keyspace!r})")
        return self.udts.resolve_udt(keyspace, name)


def _custom_type(class_name: str) -> CqlType:
    short = class_name.rsplit(".", 1)[-1]
    if short in _MARSHAL_NATIVES:
        return NATIVE_TYPES[_MARSHAL_NATIVES[short]]
    return CustomType(class_name)


def parse_cql_type(
    text: str,
    *,
    keyspace: str | None = None,
    udts: UdtResolver | None = None,
    multi_cell_tuples: bool = False,
) -> CqlType:
    """Parse a CQL type string (system_schema.columns.type or DDL) into a CqlType.

    UDT names are resolved through ``udts`` in ``keyspace`` (or the ``ks.name`` given); an unknown UDT
    raises SchemaError. Quoted Java class names map to the native type they stand for, otherwise to an
    opaque CustomType. ``multi_cell_tuples`` reads a non-frozen ``tuple<...>`` as multi-cell, which is how
    system_schema.dropped_columns records a dropped non-frozen UDT.
    """
    return _TypeParser(text, keyspace, udts, multi_cell_tuples).parse()


# ---------------------------------------------------------------------------------------------------------
# JSON rendering


def _json_sort_key(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _is_string_type(t: CqlType | None) -> bool:
    return isinstance(t, NativeType) and t.name in ("text", "ascii")


def to_json(value: Any, cql_type: CqlType | None = None) -> Any:
    """A JSON-friendly rendering of a decoded value (for ``cdc segment dump`` and test diffs).

    uuid/inet -> str, bytes -> hex, Decimal -> str, date/time/timestamp -> ISO 8601 (timestamps in UTC with
    a ``Z``), duration -> {months, days, nanoseconds}, non-finite floats -> "NaN"/"Infinity"/"-Infinity",
    sets -> lists (Cassandra's order; Python sets are sorted), maps -> an object when the keys are strings,
    otherwise a list of [key, value] pairs, tuples -> lists, UDTs -> objects.
    """
    if value is None or isinstance(value, bool | str | int):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    if isinstance(value, decimal.Decimal | uuid.UUID | ipaddress.IPv4Address | ipaddress.IPv6Address):
        return str(value)
    if isinstance(value, _dt.datetime):
        text = value.isoformat(timespec="milliseconds")
        return text[:-6] + "Z" if text.endswith("+00:00") else text
    if isinstance(value, _dt.date | CqlTime):
        return value.isoformat()
    if isinstance(value, Duration):
        return {"months": value.months, "days": value.days, "nanoseconds": value.nanoseconds}
    if isinstance(value, dict):
        return _map_to_json(list(value.items()), cql_type)
    if isinstance(value, set | frozenset):
        element = getattr(cql_type, "element", None)
        return sorted((to_json(v, element) for v in value), key=_json_sort_key)
    if isinstance(value, list | tuple):
        if isinstance(cql_type, MapType):
            return _map_to_json(list(value), cql_type)
        return [to_json(v, _element_type(cql_type, i)) for i, v in enumerate(value)]
    if isinstance(value, CounterShard):
        return {"counter_id": str(value.counter_id), "clock": value.clock, "count": value.count}
    return str(value)


def _element_type(t: CqlType | None, index: int) -> CqlType | None:
    if isinstance(t, ListType | SetType | VectorType):
        return t.element
    if isinstance(t, TupleType) and index < len(t.elements):
        return t.elements[index]
    return None


def _map_to_json(items: list[tuple[Any, Any]], t: CqlType | None) -> Any:
    if isinstance(t, UserType):
        types = dict(zip(t.field_names, t.field_types, strict=True))
        return {k: to_json(v, types.get(k)) for k, v in items}
    key_type = t.key if isinstance(t, MapType) else None
    value_type = t.value if isinstance(t, MapType) else None
    string_keys = (
        _is_string_type(key_type) if key_type is not None else all(isinstance(k, str) for k, _ in items)
    )
    if string_keys:
        return {k: to_json(v, value_type) for k, v in items}
    return [[to_json(k, key_type), to_json(v, value_type)] for k, v in items]
