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
comparable with ``schemas.change_json.json_value_row`` of the same row read from Cassandra; reconcile and
replay compare rows that way.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterable
from dataclasses import dataclass
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
    CqlTypeVisitor,
    CustomType,
    ListType,
    NativeType,
    SetType,
    TupleType,
    UserType,
    VectorType,
    every_native,
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

_NATIVE_JSON: dict[str, DataType] = dict(
    every_native(
        {
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
        },
        "the lake's JSON-form types",
    )
)


#: top-level columns of these native types get their natural lake type (see the module docstring)
_TOP_LEVEL_NATIVES = frozenset(("date", "timestamp", "blob"))


@dataclass(frozen=True, slots=True)
class _LakeForm:
    """How the lake holds one CQL type: the Spark type Spark's JSON reader parses its JSON form into,
    whether that JSON form is kept as a string, and the conversion of a top-level column (date,
    timestamp, blob; None: the JSON-form type as it is)."""

    json_type: DataType
    json_text: bool = False
    top_level: str | None = None


class _LakeForms(CqlTypeVisitor[_LakeForm]):
    """The lake form of every kind of CQL type (a visitor: a new kind of type must be added here)."""

    __slots__ = ()

    def visit_native(self, t: NativeType, *args: Any) -> _LakeForm:
        return _LakeForm(_NATIVE_JSON[t.name], top_level=t.name if t.name in _TOP_LEVEL_NATIVES else None)

    def visit_custom(self, t: CustomType, *args: Any) -> _LakeForm:
        return _LakeForm(StringType(), top_level="blob")

    def visit_list(self, t: ListType | SetType | VectorType, *args: Any) -> _LakeForm:
        return _LakeForm(ArrayType(json_type(t.element), containsNull=True))

    visit_set = visit_list
    visit_vector = visit_list

    def visit_map(self, t: CqlMapType, *args: Any) -> _LakeForm:
        if not t.key.is_text:  # Spark's JSON reader has no map with non-string keys: a JSON array
            return _LakeForm(StringType(), json_text=True)
        return _LakeForm(MapType(StringType(), json_type(t.value), valueContainsNull=True))

    def visit_tuple(self, t: TupleType, *args: Any) -> _LakeForm:
        return _LakeForm(StringType(), json_text=True)  # a heterogeneous JSON array

    def visit_user_type(self, t: UserType, *args: Any) -> _LakeForm:
        fields = [StructField(n, json_type(ft)) for n, ft in zip(t.field_names, t.field_types, strict=True)]
        return _LakeForm(StructType(fields))


_LAKE_FORMS = _LakeForms()


def is_json_text(t: CqlType) -> bool:
    """Whether the lake keeps this type as a JSON string (tuples, maps with non-text keys)."""
    return t.accept(_LAKE_FORMS).json_text


def json_type(t: CqlType) -> DataType:
    """The Spark type Spark's JSON reader parses the JSON form of ``t`` into."""
    return t.accept(_LAKE_FORMS).json_type


def _top_level_name(t: CqlType) -> str | None:
    return t.accept(_LAKE_FORMS).top_level


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


class _Normalizer(CqlTypeVisitor[Any]):
    """A non-null JSON-form value in the comparable shape of ``normalize_json_form``, per kind of type."""

    __slots__ = ()

    def visit_native(self, t: NativeType, value: Any) -> Any:
        if t.name not in ("float", "double") or isinstance(value, str):
            return value  # the JSON form writes non-finite numbers as strings
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

    def visit_custom(self, t: CustomType, value: Any) -> Any:
        return value

    def visit_list(self, t: ListType | SetType | VectorType, value: Any) -> Any:
        return [_normalize(t.element, v) for v in value]

    visit_set = visit_list
    visit_vector = visit_list

    def visit_map(self, t: CqlMapType, value: Any) -> Any:
        if is_json_text(t):
            parsed = json.loads(value) if isinstance(value, str) else value
            return [[_normalize(t.key, k), _normalize(t.value, v)] for k, v in parsed]
        return {k: _normalize(t.value, v) for k, v in dict(value).items()}

    def visit_tuple(self, t: TupleType, value: Any) -> Any:
        parsed = json.loads(value) if isinstance(value, str) else value
        return [_normalize(e, v) for e, v in zip(t.elements, parsed, strict=True)]

    def visit_user_type(self, t: UserType, value: Any) -> Any:
        return {n: _normalize(ft, value.get(n)) for n, ft in zip(t.field_names, t.field_types, strict=True)}


_NORMALIZER = _Normalizer()


def _normalize(t: CqlType, value: Any) -> Any:
    return None if value is None else t.accept(_NORMALIZER, value)


def normalize_json_form(schema: TableSchema, row: dict[str, Any]) -> dict[str, Any]:
    """A JSON-form row (from a lake row through ``json_form_columns`` and ``to_json``, or from
    ``json_value_row``) in one comparable shape: JSON-text columns parsed, doubles as floats or the
    strings NaN/Infinity/-Infinity, CQL floats at their 32-bit value, every column of the table present."""
    return {c.name: _normalize(c.type, row.get(c.name)) for c in data_columns(schema)}


def lake_table_path(lake_directory: Path, keyspace: str, table: str) -> Path:
    """Where the Delta table of a CDC table lives."""
    return lake_directory / keyspace / table
