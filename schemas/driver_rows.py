"""Rows as cassandra-driver returns them, in the clean topics' JSON form, and keys as comparable text.

The verifier compares Cassandra's ``SELECT`` with the clean topics, and the reconcile job compares it with
the lake: both turn a driver row into the same JSON image the change events carry
(``json_value_row``), so the two sides compare as plain JSON values.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
from typing import Any

from cassandra_model.cql_types import (
    CqlTime,
    CqlType,
    Duration,
    ListType,
    MapType,
    NativeType,
    SetType,
    TupleType,
    UserType,
    VectorType,
)
from cassandra_model.table_schema import TableSchema
from schemas.change_codec import json_value_row


def key_text(key: dict[str, Any]) -> str:
    """A primary key as one comparable string (sorted JSON)."""
    return json.dumps(key, sort_keys=True)


def driver_value(t: CqlType, value: Any) -> Any:
    """A cassandra-driver value as the commit-log decoder gives it (the form json_value_row takes)."""
    if value is None:
        return None
    if isinstance(t, NativeType):
        name = t.name
        if name == "date":
            return value.date() if hasattr(value, "date") else value
        if name == "time":
            return CqlTime(int(getattr(value, "nanosecond_time", value)))
        if name == "duration":
            return Duration(value.months, value.days, value.nanoseconds)
        if name == "inet":
            return ipaddress.ip_address(value)
        if name == "timestamp" and isinstance(value, dt.datetime) and value.tzinfo is None:
            return value.replace(tzinfo=dt.UTC)
        return value
    if isinstance(t, ListType | SetType | VectorType):
        return [driver_value(t.element, v) for v in value]
    if isinstance(t, MapType):
        pairs = [(driver_value(t.key, k), driver_value(t.value, v)) for k, v in value.items()]
        try:
            return dict(pairs)
        except TypeError:  # unhashable keys: the decoder gives pairs too
            return pairs
    if isinstance(t, TupleType):
        return tuple(driver_value(e, v) for e, v in zip(t.elements, value, strict=True))
    if isinstance(t, UserType):
        return {
            n: driver_value(ft, getattr(value, n, None))
            for n, ft in zip(t.field_names, t.field_types, strict=True)
        }
    return value


def driver_row_image(schema: TableSchema, row: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(key text, image in the clean topics' JSON form) of one row as cassandra-driver returns it."""
    values = {c.name: driver_value(c.type, row.get(c.name)) for c in schema.all_columns()}
    image = json_value_row(schema, values)
    return key_text({c.name: image[c.name] for c in (*schema.partition_key, *schema.clustering)}), image
