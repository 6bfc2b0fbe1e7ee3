"""How a CDC table looks in the lake: Spark types per CQL type, and the way back to the JSON form.

A lake table holds the columns of the CQL table plus a few ``_cdc_*`` columns. Values are the clean topics'
JSON form (``schemas.change_codec``) read with Spark's own JSON parser, with three top-level conversions so
the commonest columns get their natural lake type:

==========================  ==============================================================================
CQL (top-level column)      lake column
==========================  ==============================================================================
date                        DATE (``date_from_unix_date``; CQL's range is wider than Spark's)
timestamp                   TIMESTAMP (UTC; from the JSON form's epoch milliseconds)
blob, custom                BINARY
text, ascii, varchar, inet  STRING (uuid and timeuuid too, lowercase)
int types, bigint, counter  TINYINT/SMALLINT/INT/BIGINT
float, double, boolean      FLOAT/DOUBLE/BOOLEAN
varint, decimal             STRING, exact (decimal keeps its scale: "1.50")
time                        BIGINT, nanoseconds since midnight
duration                    STRUCT<months INT, days INT, nanos BIGINT>
list, set, vector           ARRAY of the element's JSON-form type
map<text|ascii, V>          MAP<STRING, V>
UDT                         STRUCT by field name
tuple, map<other K, V>      STRING holding the JSON form (a JSON array), as nothing in Spark's JSON reader
                            maps a heterogeneous array to a typed value
==========================  ==============================================================================

Inside collections and UDTs values stay in their JSON form (dates as days, timestamps as milliseconds,
blobs as base64), so a nested value never depends on Spark's date range.

``json_form_columns`` turns a lake row back into the JSON form, which ``normalize_json_form`` makes
comparable with ``schemas.change_codec.json_value_row`` of the same row read from Cassandra; reconcile and
replay compare rows that way.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from cassandra_model.cql_types import (
    CqlType,
    CustomType,
    ListType,
    NativeType,
    SetType,
    TupleType,
    UserType,
    VectorType,
)
from cassandra_model.cql_types import MapType as CqlMapType
from cassandra_model.table_schema import ColumnSchema, TableSchema

#: the lake's own columns, after the table's columns
KEY_COLUMN = "_cdc_key"  # the clean topic's key (primary key as sorted JSON): what MERGE matches on
OP_COLUMN = "_cdc_op"  # c, u or r of the change that wrote the row
WRITE_TIME_COLUMN = "_cdc_write_time_us"  # the change's Cassandra write time (µs), informational
EMITTED_COLUMN = "_cdc_ts_ms"  # when the worker emitted the change
PARTITION_COLUMN = "_cdc_partition"  # clean-topic partition and offset of the change: its order
OFFSET_COLUMN = "_cdc_offset"
#: lake columns whose values (nearly) never repeat within a data file: one key per row (a MERGE source has
#: one row per key), offsets, microsecond write times. A Parquet dictionary for them is built, found too
#: big and thrown away in every file, so the writers skip it (``spark_session``)
UNIQUE_META_COLUMNS = (KEY_COLUMN, WRITE_TIME_COLUMN, OFFSET_COLUMN)
META_COLUMNS: tuple[tuple[str, DataType], ...] = (
    (KEY_COLUMN, StringType()),
    (OP_COLUMN, StringType()),
    (WRITE_TIME_COLUMN, LongType()),
    (EMITTED_COLUMN, LongType()),
    (PARTITION_COLUMN, IntegerType()),
    (OFFSET_COLUMN, LongType()),
)

_F32 = struct.Struct("<f")

_NATIVE_JSON: dict[str, DataType] = {
    "ascii": StringType(),
    "text": StringType(),
    "varchar": StringType(),
    "inet": StringType(),
    "uuid": StringType(),
    "timeuuid": StringType(),
    "boolean": BooleanType(),
    "tinyint": ByteType(),
    "smallint": ShortType(),
    "int": IntegerType(),
    "bigint": LongType(),
    "counter": LongType(),
    "varint": StringType(),
    "decimal": StringType(),
    "float": FloatType(),
    "double": DoubleType(),
    "date": IntegerType(),
    "time": LongType(),
    "timestamp": LongType(),
    "blob": StringType(),
    "empty": StringType(),
    "duration": StructType(
        [
            StructField("months", IntegerType()),
            StructField("days", IntegerType()),
            StructField("nanos", LongType()),
        ]
    ),
}


def _is_text(t: CqlType) -> bool:
    return isinstance(t, NativeType) and t.name in ("text", "ascii", "varchar")


def is_json_text(t: CqlType) -> bool:
    """Whether the lake keeps this type as a JSON string (tuples, maps with non-text keys)."""
    return isinstance(t, TupleType) or (isinstance(t, CqlMapType) and not _is_text(t.key))


def json_type(t: CqlType) -> DataType:
    """The Spark type Spark's JSON reader parses the JSON form of ``t`` into."""
    if isinstance(t, NativeType):
        return _NATIVE_JSON[t.name]
    if isinstance(t, CustomType) or is_json_text(t):
        return StringType()
    if isinstance(t, ListType | SetType | VectorType):
        return ArrayType(json_type(t.element), containsNull=True)
    if isinstance(t, CqlMapType):
        return MapType(StringType(), json_type(t.value), valueContainsNull=True)
    if isinstance(t, UserType):
        return StructType(
            [StructField(n, json_type(ft)) for n, ft in zip(t.field_names, t.field_types, strict=True)]
        )
    raise TypeError(f"no lake type for CQL type {t}")


def _top_level_name(t: CqlType) -> str | None:
    if isinstance(t, CustomType):
        return "blob"
    if isinstance(t, NativeType) and t.name in ("date", "timestamp", "blob"):
        return t.name
    return None


def lake_type(t: CqlType) -> DataType:
    """The lake column type of a top-level column of type ``t``."""
    name = _top_level_name(t)
    if name == "date":
        return DateType()
    if name == "timestamp":
        return TimestampType()
    if name == "blob":
        return BinaryType()
    return json_type(t)


def data_columns(schema: TableSchema) -> list[ColumnSchema]:
    """The table's columns in SELECT * order (partition key, clustering, then the rest by name)."""
    return list(schema.all_columns())


def json_struct(schema: TableSchema) -> StructType:
    """The schema of a row image in the JSON form (the ``after`` of an envelope) for ``from_json``."""
    return StructType([StructField(c.name, json_type(c.type)) for c in data_columns(schema)])


def lake_struct(schema: TableSchema) -> StructType:
    """The full lake table schema: the table's columns, then the ``_cdc_*`` columns."""
    fields = [StructField(c.name, lake_type(c.type)) for c in data_columns(schema)]
    fields.extend(StructField(name, t) for name, t in META_COLUMNS)
    return StructType(fields)


def lake_columns(schema: TableSchema, image: Column) -> list[Column]:
    """Lake column expressions from a parsed JSON-form image (a struct column of ``json_struct``)."""
    out = []
    for column in data_columns(schema):
        value = image.getField(column.name)
        name = _top_level_name(column.type)
        if name == "date":
            value = F.date_from_unix_date(value)
        elif name == "timestamp":
            value = F.timestamp_millis(value)
        elif name == "blob":
            value = F.unbase64(value)
        out.append(value.alias(column.name))
    return out


def json_form_columns(schema: TableSchema, present: Iterable[str] | None = None) -> list[Column]:
    """Expressions turning a lake row's table columns back into the JSON form; only the ``present``
    columns when given (a column added in Cassandra reaches the lake with the first change after it)."""
    out = []
    have = None if present is None else set(present)
    for column in data_columns(schema):
        if have is not None and column.name not in have:
            continue
        value = F.col(f"`{column.name}`")
        name = _top_level_name(column.type)
        if name == "date":
            value = F.unix_date(value)
        elif name == "timestamp":
            value = F.unix_millis(value)
        elif name == "blob":
            value = F.base64(value)
        out.append(value.alias(column.name))
    return out


def _normalize(t: CqlType, value: Any) -> Any:
    if value is None:
        return None
    if isinstance(t, NativeType) and t.name in ("float", "double"):
        if isinstance(value, str):  # the JSON form writes non-finite numbers as strings
            return value
        value = float(value)
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        if t.name == "float":
            # a lake FLOAT comes back through to_json as its shortest decimal (1.1), Cassandra's as the
            # float widened to a double (1.100000023841858): both are the same 32-bit value
            return _F32.unpack(_F32.pack(value))[0]
        return value
    if is_json_text(t):
        parsed = json.loads(value) if isinstance(value, str) else value
        if isinstance(t, TupleType):
            return [_normalize(e, v) for e, v in zip(t.elements, parsed, strict=True)]
        return [[_normalize(t.key, k), _normalize(t.value, v)] for k, v in parsed]
    if isinstance(t, ListType | SetType | VectorType):
        return [_normalize(t.element, v) for v in value]
    if isinstance(t, CqlMapType):
        return {k: _normalize(t.value, v) for k, v in dict(value).items()}
    if isinstance(t, UserType):
        return {n: _normalize(ft, value.get(n)) for n, ft in zip(t.field_names, t.field_types, strict=True)}
    return value


def normalize_json_form(schema: TableSchema, row: dict[str, Any]) -> dict[str, Any]:
    """A JSON-form row (from a lake row through ``json_form_columns`` and ``to_json``, or from
    ``json_value_row``) in one comparable shape: JSON-text columns parsed, doubles as floats or the
    strings NaN/Infinity/-Infinity, CQL floats at their 32-bit value, every column of the table present."""
    return {c.name: _normalize(c.type, row.get(c.name)) for c in data_columns(schema)}


def lake_table_path(lake_directory: Path, keyspace: str, table: str) -> Path:
    """Where the Delta table of a CDC table lives."""
    return lake_directory / keyspace / table
