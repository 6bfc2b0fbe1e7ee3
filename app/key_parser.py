"""A primary key given as JSON (as clean events spell it) to the bytes the state is keyed by.

Values follow the JSON mapping of the clean topics (schemas/change_codec.py): numbers for integer and
floating types, strings for text, uuid, inet, decimal and varint, epoch milliseconds for timestamps, days
since the epoch for dates, nanoseconds for time, base64 for blobs, `{months, days, nanos}` for durations,
arrays and objects for frozen collections, tuples and UDTs. For people typing a key, ISO-8601 timestamps
and dates and `0x…` hex blobs are accepted too. Each type reads the shape of its JSON
(``CqlType.from_event_json``); native values are read here, into what cassandra-driver serializes (its
``Date``, its ``Duration``), which the model below may not import.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import decimal
import uuid
from collections.abc import Callable
from typing import Any

from cassandra.util import Date
from cassandra.util import Duration as DriverDuration

from cassandra_model.cql_types import NativeType, every_native
from cassandra_model.table_schema import ColumnSchema, TableSchema
from cassandra_model.value_serializer import serialize


class PrimaryKeyError(ValueError):
    """A primary key given over REST that does not fit the table."""


def _uuid(value: Any) -> uuid.UUID:
    return uuid.UUID(str(value))


def _timestamp(value: Any) -> dt.datetime:
    if isinstance(value, int):
        return dt.datetime.fromtimestamp(value / 1000, tz=dt.UTC)
    return dt.datetime.fromisoformat(str(value))


def _date(value: Any) -> Any:
    if isinstance(value, int):
        return Date(value)
    return dt.date.fromisoformat(str(value))


def _blob(value: Any) -> bytes:
    text = str(value)
    return bytes.fromhex(text[2:]) if text.startswith("0x") else base64.b64decode(text, validate=True)


def _duration(value: Any) -> DriverDuration:
    return DriverDuration(value["months"], value["days"], value["nanos"])


def _decimal(value: Any) -> decimal.Decimal:
    return decimal.Decimal(str(value))


def _as_is(value: Any) -> Any:
    return value


#: a native type's JSON value as the value cassandra-driver serializes (float: NaN and the infinities are
#: strings in JSON, which float() reads too)
_FROM_JSON: dict[str, Callable[[Any], Any]] = dict(
    every_native(
        {
            "ascii": _as_is,
            "text": _as_is,
            "blob": _blob,
            "boolean": _as_is,
            "tinyint": int,
            "smallint": int,
            "int": int,
            "bigint": int,
            "varint": int,
            "float": float,
            "double": float,
            "decimal": _decimal,
            "date": _date,
            "time": int,
            "timestamp": _timestamp,
            "uuid": _uuid,
            "timeuuid": _uuid,
            "inet": _as_is,
            "duration": _duration,
            "counter": int,
            "empty": _as_is,
        },
        "the REST API's key values",
    )
)


def _native_from_json(t: NativeType, value: Any) -> Any:
    return _FROM_JSON[t.name](value)


def _component(column: ColumnSchema, key: dict[str, Any]) -> bytes:
    if column.name not in key or key[column.name] is None:
        raise PrimaryKeyError(f"missing key column {column.name} ({column.type.cql()})")
    try:
        t = column.type
        return serialize(t, t.from_event_json(key[column.name], _native_from_json))
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
