"""A primary key given as JSON (as clean events spell it) to the bytes the state is keyed by.

Values follow the JSON mapping of the clean topics (schemas/change_codec.py): numbers for integer and
floating types, strings for text, uuid, inet, decimal and varint, epoch milliseconds for timestamps, days
since the epoch for dates, nanoseconds for time, base64 for blobs, `{months, days, nanos}` for durations,
arrays and objects for frozen collections, tuples and UDTs. For people typing a key, ISO-8601 timestamps
and dates and `0x…` hex blobs are accepted too.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import decimal
import uuid
from typing import Any

from cassandra.util import Date
from cassandra.util import Duration as DriverDuration

from cassandra_model.cql_types import CqlType, ListType, MapType, NativeType, SetType, TupleType, UserType
from cassandra_model.table_schema import ColumnSchema, TableSchema
from cassandra_model.value_serializer import serialize


class PrimaryKeyError(ValueError):
    """A primary key given over REST that does not fit the table."""


def _native(name: str, value: Any) -> Any:
    if name in ("uuid", "timeuuid"):
        return uuid.UUID(str(value))
    if name == "timestamp":
        if isinstance(value, int):
            return dt.datetime.fromtimestamp(value / 1000, tz=dt.UTC)
        return dt.datetime.fromisoformat(str(value))
    if name == "date":
        if isinstance(value, int):
            return Date(value)
        return dt.date.fromisoformat(str(value))
    if name == "blob":
        text = str(value)
        return bytes.fromhex(text[2:]) if text.startswith("0x") else base64.b64decode(text, validate=True)
    if name == "duration":
        return DriverDuration(value["months"], value["days"], value["nanos"])
    if name in ("float", "double") and isinstance(value, str):
        return float(value)  # NaN and the infinities are strings in JSON
    if name == "decimal":
        return decimal.Decimal(str(value))
    if name in ("varint", "bigint", "int", "smallint", "tinyint", "counter", "time"):
        return int(value)
    if name in ("float", "double"):
        return float(value)
    return value


def python_value(t: CqlType, value: Any) -> Any:
    """The Python value cassandra-driver serializes, from its JSON form."""
    if isinstance(t, NativeType):
        return _native(t.name, value)
    if isinstance(t, ListType | SetType):
        return [python_value(t.element, v) for v in value]
    if isinstance(t, MapType):
        pairs = value.items() if isinstance(value, dict) else value
        return {python_value(t.key, k): python_value(t.value, v) for k, v in pairs}
    if isinstance(t, TupleType):
        return tuple(
            None if v is None else python_value(e, v) for e, v in zip(t.elements, value, strict=True)
        )
    if isinstance(t, UserType):
        return {
            n: None if value.get(n) is None else python_value(ft, value[n])
            for n, ft in zip(t.field_names, t.field_types, strict=True)
        }
    raise PrimaryKeyError(f"type {t.cql()} cannot be given in a key")


def _component(column: ColumnSchema, key: dict[str, Any]) -> bytes:
    if column.name not in key or key[column.name] is None:
        raise PrimaryKeyError(f"missing key column {column.name} ({column.type.cql()})")
    try:
        return serialize(column.type, python_value(column.type, key[column.name]))
    except (TypeError, ValueError, KeyError, OverflowError, decimal.InvalidOperation, binascii.Error) as exc:
        raise PrimaryKeyError(f"column {column.name} ({column.type.cql()}): {exc}") from exc


def parse_primary_key(schema: TableSchema, key: Any) -> tuple[bytes, tuple[bytes | None, ...] | None]:
    """Partition key bytes, and the clustering values when every clustering column is given (else None:
    the whole partition is asked for)."""
    if not isinstance(key, dict):
        raise PrimaryKeyError("the key must be a JSON object of column names to values")
    names = {c.name for c in (*schema.partition_key, *schema.clustering)}
    unknown = sorted(set(key) - names)
    if unknown:
        raise PrimaryKeyError(
            f"{', '.join(unknown)} not primary key columns (those are {', '.join(sorted(names))})"
        )
    parts = [_component(c, key) for c in schema.partition_key]
    if len(parts) == 1:
        partition_key = parts[0]
    else:
        partition_key = b"".join(len(p).to_bytes(2, "big") + p + b"\x00" for p in parts)
    if not schema.clustering or not all(c.name in key for c in schema.clustering):
        return partition_key, None
    return partition_key, tuple(_component(c, key) for c in schema.clustering)
