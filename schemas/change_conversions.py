"""Conversions both change-event codecs share: Python values to their wire forms, and rows to records.

The values are those of ``state.decode_row`` (and the fallback forms a consumer may hand in: ints for
dates and timestamps, ``datetime.time``, the driver's ``Time``). A ``RowSpec`` lists, once per table,
only the columns whose values need work, so converting a row touches the others not at all.
"""

from __future__ import annotations

import datetime as _dt
import decimal
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from cassandra_model.cql_types import CqlTime
from cassandra_model.table_schema import ColumnSchema, TableSchema
from runtime.config import DecimalHandling
from schemas.change_codec import ChangeEncodingError
from schemas.change_event import ChangeEventError

Converter = Callable[[Any], Any]

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
_EPOCH_ORDINAL = _dt.date(1970, 1, 1).toordinal()
_ONE_MS = _dt.timedelta(milliseconds=1)


# ---------------------------------------------------------------------------------------------------------
# scalar conversions shared by both codecs (the decoder's Python values, and their fallback forms)


def epoch_days(v: Any) -> int:
    return v if type(v) is int else v.toordinal() - _EPOCH_ORDINAL


def epoch_millis(v: Any) -> int:
    if type(v) is int:
        return v
    if v.tzinfo is None:  # naive: UTC, as fastavro and the driver read it
        v = v.replace(tzinfo=_dt.UTC)
    return (v - _EPOCH) // _ONE_MS


def nanos_of_day(v: Any) -> int:
    if type(v) is CqlTime:
        return v.nanoseconds
    if isinstance(v, _dt.time):
        return ((v.hour * 60 + v.minute) * 60 + v.second) * 1_000_000_000 + v.microsecond * 1000
    if hasattr(v, "nanosecond_time"):  # cassandra.util.Time
        return int(v.nanosecond_time)
    return int(v)


def duration_fields(v: Any) -> dict[str, int]:
    return {"months": v.months, "days": v.days, "nanos": v.nanoseconds}


def plain_decimal(v: Any) -> str:
    """A decimal as plain digits, exact (``1E+3`` -> ``"1000"``; the scale of ``1.50`` kept): what every
    sink can store, or cast to a numeric type."""
    return format(v if isinstance(v, decimal.Decimal) else decimal.Decimal(v), "f")


def decimal_double(v: Any) -> float:
    """A decimal as the nearest double (lossy beyond about 15 significant digits)."""
    return float(v)


def key_decimal_handling(handling: DecimalHandling) -> DecimalHandling:
    """The decimal form of key columns: exact always, since two keys that a double cannot tell apart
    would be one row downstream (compaction, upserts)."""
    return "string" if handling == "double" else handling


def always_null(v: Any) -> None:
    return None


def map_items(v: Any) -> Iterable[tuple[Any, Any]]:
    """Map entries: the decoder gives a dict, or (key, value) pairs when keys are not hashable."""
    return v.items() if isinstance(v, dict) else v


def as_list(v: Any) -> list[Any]:
    return v if type(v) is list else list(v)


# ---------------------------------------------------------------------------------------------------------
# per-table row converters


@dataclass(slots=True)
class RowSpec:
    """How to turn a row dict (CQL names, Python values) into the wire form of one record."""

    names: frozenset[str]
    #: (column, converter or None, union branch name or None, required) for columns that need work
    work: list[tuple[str, Converter | None, str | None, bool]]
    #: CQL name -> Avro name where they differ (None: no renaming)
    renames: dict[str, str] | None


def check_columns(names: frozenset[str], row: dict[str, Any], table: str) -> None:
    if row.keys() != names:
        missing = sorted(names - row.keys())
        extra = sorted(row.keys() - names)
        raise ChangeEncodingError(
            f"row columns do not match the table schema (missing {missing}, unknown {extra})",
            table=table,
            column=(missing or extra)[0],
        )


def convert_row(spec: RowSpec, row: dict[str, Any], table: str) -> dict[str, Any]:
    if row.keys() != spec.names:
        check_columns(spec.names, row, table)
    out = dict(row)
    name = ""
    try:
        for name, conv, branch, required in spec.work:
            v = out[name]
            if v is None:
                if required:
                    raise ValueError("a primary key column cannot be null")
                continue
            if conv is not None:
                v = conv(v)
            if branch is not None:
                v = (branch, v)
            out[name] = v
    except ChangeEventError:
        raise
    except Exception as exc:
        raise ChangeEncodingError(
            f"cannot encode {type(out[name]).__name__} value {out[name]!r:.120}: {exc}",
            table=table,
            column=name,
        ) from exc
    renames = spec.renames
    if renames is not None:
        out = {renames.get(k, k): v for k, v in out.items()}
    return out


def key_columns(schema: TableSchema) -> list[ColumnSchema]:
    return [*schema.partition_key, *schema.clustering]
