"""CQL values to their serialized bytes (native protocol v4; the frozen form for collections and UDTs).

The inverse of the decoder's value reading: the REST API turns a primary key given as JSON into the
partition and clustering bytes the state is keyed by, and tests build cells from Python values.
Set and map elements are sorted by the element type's order, as Cassandra stores them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cassandra.cqltypes import lookup_casstype

from cassandra_model.clustering_order import value_encoder
from cassandra_model.cql_types import CqlType, ListType, MapType, NativeType, SetType, TupleType, UserType

_DRIVER_TYPES = {
    "ascii": "AsciiType",
    "text": "UTF8Type",
    "blob": "BytesType",
    "boolean": "BooleanType",
    "tinyint": "ByteType",
    "smallint": "ShortType",
    "int": "Int32Type",
    "bigint": "LongType",
    "varint": "IntegerType",
    "float": "FloatType",
    "double": "DoubleType",
    "decimal": "DecimalType",
    "date": "SimpleDateType",
    "time": "TimeType",
    "timestamp": "TimestampType",
    "uuid": "UUIDType",
    "timeuuid": "TimeUUIDType",
    "inet": "InetAddressType",
    "duration": "DurationType",
}


@dataclass(frozen=True, slots=True)
class SerializedValue:
    """Exact serialized bytes for a value (an empty value, an unusual encoding)."""

    data: bytes


def sized(item: bytes | None) -> bytes:
    if item is None:
        return (-1).to_bytes(4, "big", signed=True)
    return len(item).to_bytes(4, "big") + item


def serialize(t: CqlType, value: Any) -> bytes:
    """The native-protocol v4 bytes of a Python value of a CQL type (frozen form for collections)."""
    if isinstance(value, SerializedValue):
        return value.data
    if isinstance(t, NativeType):
        return lookup_casstype(_DRIVER_TYPES[t.name]).serialize(value, 4)
    if isinstance(t, ListType):
        items = [serialize(t.element, v) for v in value]
        return len(items).to_bytes(4, "big") + b"".join(sized(i) for i in items)
    if isinstance(t, SetType):
        encode = value_encoder(t.element)
        items = sorted({serialize(t.element, v) for v in value}, key=lambda b: encode(b) if b else b"")
        return len(items).to_bytes(4, "big") + b"".join(sized(i) for i in items)
    if isinstance(t, MapType):
        encode = value_encoder(t.key)
        pairs = sorted(
            ((serialize(t.key, k), serialize(t.value, v)) for k, v in dict(value).items()),
            key=lambda kv: encode(kv[0]) if kv[0] else b"",
        )
        return len(pairs).to_bytes(4, "big") + b"".join(sized(k) + sized(v) for k, v in pairs)
    if isinstance(t, TupleType):
        return b"".join(
            sized(None if v is None else serialize(e, v)) for e, v in zip(t.elements, value, strict=True)
        )
    if isinstance(t, UserType):
        fields = dict(value)
        return b"".join(
            sized(None if fields.get(n) is None else serialize(ft, fields[n]))
            for n, ft in zip(t.field_names, t.field_types, strict=True)
        )
    raise TypeError(f"cannot serialize a value of type {t.cql()}")
