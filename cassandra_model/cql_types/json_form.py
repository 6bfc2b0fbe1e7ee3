"""A JSON-friendly rendering of decoded values, for ``cdc segment dump`` and test diffs.

Scalars are rendered by their Python class, so a value renders the same whatever type it came from;
the CQL type, when known, only says how to render what is inside a collection, tuple or UDT (each type's
``to_json`` does that, with the helpers here).
"""

from __future__ import annotations

import datetime as _dt
import decimal
import ipaddress
import json
import math
import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from cassandra_model.cql_types.values import CounterShard, CqlTime, Duration

if TYPE_CHECKING:
    from cassandra_model.cql_types.cql_type import CqlType


def to_json(value: Any, cql_type: CqlType | None = None) -> Any:
    """A JSON-friendly rendering of a decoded value (for ``cdc segment dump`` and test diffs).

    uuid/inet -> str, bytes -> hex, Decimal -> str, date/time/timestamp -> ISO 8601 (timestamps in UTC with
    a ``Z``), duration -> {months, days, nanoseconds}, non-finite floats -> "NaN"/"Infinity"/"-Infinity",
    sets -> lists (Cassandra's order; Python sets are sorted), maps -> an object when the keys are strings,
    otherwise a list of [key, value] pairs, tuples -> lists, UDTs -> objects.
    """
    return plain_json(value) if cql_type is None else cql_type.to_json(value)


def json_sort_key(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def plain_json(value: Any) -> Any:
    """``to_json`` without a type: containers are rendered element by element, maps by their keys."""
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
        return map_json(list(value.items()), None, None)
    if isinstance(value, set | frozenset):
        return set_json(value, None)
    if isinstance(value, list | tuple):
        return [plain_json(v) for v in value]
    if isinstance(value, CounterShard):
        return {"counter_id": str(value.counter_id), "clock": value.clock, "count": value.count}
    return str(value)


def set_json(values: Iterable[Any], element: CqlType | None) -> list[Any]:
    """A Python set: sorted, for a stable rendering."""
    return sorted((to_json(v, element) for v in values), key=json_sort_key)


def map_json(items: list[tuple[Any, Any]], key_type: CqlType | None, value_type: CqlType | None) -> Any:
    """An object when the keys are strings (by the key type, or by the keys when it is not known),
    otherwise a list of [key, value] pairs."""
    string_keys = key_type.is_text if key_type is not None else all(isinstance(k, str) for k, _ in items)
    if string_keys:
        return {k: to_json(v, value_type) for k, v in items}
    return [[to_json(k, key_type), to_json(v, value_type)] for k, v in items]
