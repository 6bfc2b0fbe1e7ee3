"""Change events in Kafka Connect's JSON form (``encoding: json_schema``), for users without a registry.

Kafka Connect's ``JsonConverter`` with ``schemas.enable=true`` reads and writes ``{"schema": S,
"payload": P}``: every record carries its Connect schema, so sinks (JDBC, Elasticsearch, S3 with
Parquet) know each field's type without a registry. The payload is the JSON encoding's
(``schemas.change_json``), except tuples, which become structs ``{"f0": ..., "f1": ...}`` because a Connect
array holds one type. The schema per CQL type:

=====================  ===================================================================================
CQL                    Connect schema (``type``, logical ``name``)
=====================  ===================================================================================
ascii, text, varchar   string
boolean                boolean
tinyint/smallint/int   int8 / int16 / int32
bigint, counter        int64
varint                 string (exact)
decimal                string (exact; ``decimal_handling: precise`` keeps the scale, ``"1E+3"``, ``string``
                       writes plain digits, ``"1000"``), or double with ``decimal_handling: double``
float, double          float, double (Connect's FLOAT32 and FLOAT64; NaN and infinities are written as
                       strings, as in the JSON encoding, which JsonConverter cannot read: use Avro for them)
date                   int32, ``org.apache.kafka.connect.data.Date`` (days since 1970-01-01)
time                   int64, ``io.debezium.time.NanoTime`` (nanoseconds since midnight)
timestamp              int64, ``org.apache.kafka.connect.data.Timestamp`` (milliseconds since the epoch)
uuid, timeuuid         string, ``io.debezium.data.Uuid``
inet                   string
blob, custom types     bytes (base64 in the JSON)
duration               struct ``cdc.change.Duration`` {months: int32, days: int32, nanos: int64}
list, set, vector      array
map                    map (keys that are Connect strings: a JSON object; other keys: an array of
                       [key, value] pairs, which is how JsonConverter writes maps of non-string keys)
tuple                  struct ``...<column>.Tuple`` {f0, f1, ...}, each optional
UDT                    struct named after the type, fields by CQL name, each optional
=====================  ===================================================================================

Names follow Debezium: the value is the struct ``<topic>.Envelope`` {before, after: ``<topic>.Value``,
source: ``cdc.change.Source``, op, ts_ms}, the key ``<topic>.Key``; partition key columns are required,
every other column optional. Each column's field carries the parameter ``cql_type``. The schema text is
made once per table schema version, so encoding adds two byte copies to the JSON encoding's work.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cassandra_model.cql_types import (
    CqlType,
    CqlTypeVisitor,
    CustomType,
    ListType,
    MapType,
    NativeType,
    SetType,
    TupleType,
    UserType,
    VectorType,
    every_native,
)
from cassandra_model.table_schema import ColumnKind, ColumnSchema, TableSchema
from runtime.config import DecimalHandling
from schemas.change_codec import ChangeDecodingError, ChangeEncodingError
from schemas.change_conversions import Converter, key_columns, key_decimal_handling, map_items
from schemas.change_event import SOURCE_RECORD, ChangeSource, clean_topic_name
from schemas.change_json import JsonChangeCodec, JsonConverters
from state.change import RowChange

#: a Connect schema in JsonConverter's JSON form
ConnectSchema = dict[str, Any]

_DATE = {"type": "int32", "name": "org.apache.kafka.connect.data.Date", "version": 1}
_TIMESTAMP = {"type": "int64", "name": "org.apache.kafka.connect.data.Timestamp", "version": 1}
_UUID = {"type": "string", "name": "io.debezium.data.Uuid", "version": 1}
_DURATION = {
    "type": "struct",
    "name": "cdc.change.Duration",
    "fields": [
        {"field": "months", "type": "int32", "optional": False},
        {"field": "days", "type": "int32", "optional": False},
        {"field": "nanos", "type": "int64", "optional": False},
    ],
}

_CONNECT_SCALARS: Mapping[str, ConnectSchema] = every_native(
    {
        "ascii": {"type": "string"},
        "text": {"type": "string"},
        "boolean": {"type": "boolean"},
        "tinyint": {"type": "int8"},
        "smallint": {"type": "int16"},
        "int": {"type": "int32"},
        "bigint": {"type": "int64"},
        "counter": {"type": "int64"},
        "varint": {"type": "string"},
        "float": {"type": "float"},
        "double": {"type": "double"},
        "decimal": {"type": "string"},
        "date": _DATE,
        "time": {"type": "int64", "name": "io.debezium.time.NanoTime", "version": 1},
        "timestamp": _TIMESTAMP,
        "uuid": _UUID,
        "timeuuid": _UUID,
        "inet": {"type": "string"},
        "duration": _DURATION,
        "blob": {"type": "bytes"},
        "empty": {"type": "string"},
    },
    "the Kafka Connect schema of change events",
)


class ConnectPayloadConverters(JsonConverters):
    """The JSON encoding's value forms, with tuples as structs ``{"f0": ..., ...}``, and every map whose
    keys are Connect strings (text, but also uuid, inet, varint, decimal unless written as doubles) as a
    JSON object: JsonConverter reads the ``[[key, value], ...]`` form only for keys of other types."""

    __slots__ = ("_schemas",)

    def __init__(self, decimal_handling: DecimalHandling = "precise") -> None:
        super().__init__(decimal_handling)
        self._schemas = ConnectSchemaBuilder(decimal_handling)

    def visit_map(self, t: MapType, *args: Any) -> Converter | None:
        if not keyed_by_connect_strings(t, self._schemas):
            return super().visit_map(t)
        kc = self.convert(t.key)
        vc = self.convert(t.value)

        def string_keyed(v: Any) -> dict[str, Any]:
            return {
                k if kc is None else kc(k): x if x is None or vc is None else vc(x) for k, x in map_items(v)
            }

        return string_keyed

    def visit_tuple(self, t: TupleType, *args: Any) -> Converter | None:
        convs = [(f"f{i}", self.convert(e)) for i, e in enumerate(t.elements)]

        def tuple_struct(v: Any) -> dict[str, Any]:
            return {n: x if x is None or c is None else c(x) for (n, c), x in zip(convs, v, strict=True)}

        return tuple_struct


class ConnectSchemaBuilder(CqlTypeVisitor[ConnectSchema]):
    """The Connect schema of a CQL type; ``path`` names nested structs after their place in the column."""

    __slots__ = ("_decimal",)

    def __init__(self, decimal_handling: DecimalHandling = "precise") -> None:
        self._decimal: ConnectSchema = {"type": "double" if decimal_handling == "double" else "string"}

    def schema_of(self, t: CqlType, path: tuple[str, ...], optional: bool) -> ConnectSchema:
        return {**t.accept(self, path), "optional": optional}

    def visit_native(self, t: NativeType, path: tuple[str, ...]) -> ConnectSchema:
        if t.name == "decimal":
            return dict(self._decimal)
        return dict(_CONNECT_SCALARS[t.name])

    def visit_custom(self, t: CustomType, path: tuple[str, ...]) -> ConnectSchema:
        return {"type": "bytes"}

    def visit_list(self, t: ListType | SetType | VectorType, path: tuple[str, ...]) -> ConnectSchema:
        return {"type": "array", "items": self.schema_of(t.element, (*path, "element"), False)}

    visit_set = visit_list
    visit_vector = visit_list

    def visit_map(self, t: MapType, path: tuple[str, ...]) -> ConnectSchema:
        return {
            "type": "map",
            "keys": self.schema_of(t.key, (*path, "key"), False),
            "values": self.schema_of(t.value, (*path, "value"), False),
        }

    def visit_tuple(self, t: TupleType, path: tuple[str, ...]) -> ConnectSchema:
        fields = [
            {"field": f"f{i}", **self.schema_of(e, (*path, f"f{i}"), True)} for i, e in enumerate(t.elements)
        ]
        return {"type": "struct", "name": ".".join((*path, "Tuple")), "fields": fields}

    def visit_user_type(self, t: UserType, path: tuple[str, ...]) -> ConnectSchema:
        fields = [
            {"field": n, **self.schema_of(ft, (*path, n), True)}
            for n, ft in zip(t.field_names, t.field_types, strict=True)
        ]
        return {"type": "struct", "name": ".".join((*path, t.name)), "fields": fields}

    def row(self, topic: str, record: str, columns: list[ColumnSchema], optional: bool) -> ConnectSchema:
        """A row struct ``<topic>.<record>`` (Key or Value): partition key columns required, the others
        optional; a column's nested structs are named ``<topic>.<column>...``, as in the Avro schemas."""
        fields = []
        for column in columns:
            field = self.schema_of(column.type, (topic, column.name), column.kind != ColumnKind.PARTITION_KEY)
            field["parameters"] = {"cql_type": column.type.cql()}
            fields.append({"field": column.name, **field})
        return {"type": "struct", "name": f"{topic}.{record}", "optional": optional, "fields": fields}


_CONNECT_SCHEMAS = ConnectSchemaBuilder()


def keyed_by_connect_strings(t: MapType, schemas: ConnectSchemaBuilder = _CONNECT_SCHEMAS) -> bool:
    """Whether the payload writes this map as a JSON object although the JSON encoding writes it as
    ``[[key, value], ...]``: its keys are Connect strings (uuid, inet, varint, decimal unless written as
    doubles) but not text."""
    return not t.key.is_text and t.key.accept(schemas, ())["type"] == "string"


_AVRO_TO_CONNECT = {"string": "string", "long": "int64", "int": "int32", "boolean": "boolean"}


def source_schema() -> ConnectSchema:
    """The ``source`` struct, field by field from the Avro record every encoding shares
    (``schemas/change_source.avsc``), so the two can never disagree."""
    fields = []
    for field in SOURCE_RECORD["fields"]:
        avro = field["type"]
        optional = isinstance(avro, list)
        kind = next(t for t in avro if t != "null") if optional else avro
        fields.append({"field": field["name"], "type": _AVRO_TO_CONNECT[kind], "optional": optional})
    return {
        "type": "struct",
        "name": f"{SOURCE_RECORD['namespace']}.{SOURCE_RECORD['name']}",
        "optional": False,
        "fields": fields,
    }


_SOURCE_SCHEMA = source_schema()


def key_schema(
    topic: str, schema: TableSchema, decimal_handling: DecimalHandling = "precise"
) -> ConnectSchema:
    """The Connect schema of a table's keys: the struct ``<topic>.Key`` (decimals exact, see
    ``key_decimal_handling``)."""
    builder = ConnectSchemaBuilder(key_decimal_handling(decimal_handling))
    return builder.row(topic, "Key", key_columns(schema), False)


def value_schema(
    topic: str, schema: TableSchema, decimal_handling: DecimalHandling = "precise"
) -> ConnectSchema:
    """The Connect schema of a table's change events: the struct ``<topic>.Envelope``."""
    row = ConnectSchemaBuilder(decimal_handling).row(topic, "Value", schema.all_columns(), True)
    return {
        "type": "struct",
        "name": f"{topic}.Envelope",
        "optional": False,
        "fields": [
            {"field": "before", **row},
            {"field": "after", **row},
            {"field": "source", **_SOURCE_SCHEMA},
            {"field": "op", "type": "string", "optional": False},
            {"field": "ts_ms", "type": "int64", "optional": True},
        ],
    }


def _head(schema: ConnectSchema) -> bytes:
    return (
        b'{"schema":'
        + json.dumps(schema, separators=(",", ":"), ensure_ascii=False).encode()
        + b',"payload":'
    )


@dataclass(slots=True)
class _ConnectTable:
    key_head: bytes
    value_head: bytes


class ConnectJsonChangeCodec:
    """Change events as Kafka Connect JSON with schemas (module notes), for the clean topics of
    ``<topic_prefix>.<keyspace>.<table>``. Keys stay byte-for-byte equal for equal primary keys (the key
    schema depends only on the primary key's columns), so log compaction works as with plain JSON."""

    def __init__(self, topic_prefix: str = "cdc", *, decimal_handling: DecimalHandling = "precise") -> None:
        clean_topic_name(topic_prefix, "ks", "table")  # validate the prefix early
        self.topic_prefix = topic_prefix
        self.decimal_handling = decimal_handling
        keys = key_decimal_handling(decimal_handling)
        values = ConnectPayloadConverters(decimal_handling).convert
        self._payloads = JsonChangeCodec(
            values, values if keys == decimal_handling else ConnectPayloadConverters(keys).convert
        )
        self._tables: dict[int, tuple[TableSchema, _ConnectTable]] = {}

    def _table(self, schema: TableSchema) -> _ConnectTable:
        found = self._tables.get(id(schema))
        if found is not None and found[0] is schema:
            return found[1]
        topic = clean_topic_name(self.topic_prefix, schema.keyspace, schema.table)
        try:
            table = _ConnectTable(
                _head(key_schema(topic, schema, self.decimal_handling)),
                _head(value_schema(topic, schema, self.decimal_handling)),
            )
        except TypeError as exc:
            raise ChangeEncodingError(str(exc), table=schema.name) from exc
        if len(self._tables) > 4096:
            self._tables.clear()
        self._tables[id(schema)] = (schema, table)
        return table

    async def prepare(self, schema: TableSchema) -> None:
        self._table(schema)
        await self._payloads.prepare(schema)

    def encode_key(self, schema: TableSchema, key: dict[str, Any]) -> bytes:
        return self._table(schema).key_head + self._payloads.encode_key(schema, key) + b"}"

    def encode_value(self, schema: TableSchema, envelope: dict[str, Any]) -> bytes:
        return self._table(schema).value_head + self._payloads.encode_value(schema, envelope) + b"}"

    def encode_change(
        self, schema: TableSchema, change: RowChange, source: ChangeSource, ts_ms: int
    ) -> tuple[bytes, bytes]:
        table = self._table(schema)
        key, value = self._payloads.encode_change(schema, change, source, ts_ms)
        return table.key_head + key + b"}", table.value_head + value + b"}"

    def decode_key(self, data: bytes) -> dict[str, Any]:
        return self._payload(data, "key")

    def decode_value(self, data: bytes) -> dict[str, Any]:
        return self._payload(data, "value")

    def _payload(self, data: bytes, what: str) -> dict[str, Any]:
        """The payload of a ``{"schema", "payload"}`` record, in the JSON encoding's form."""
        record = self._payloads.decode_json_object(data, what)
        if set(record) != {"schema", "payload"}:
            raise ChangeDecodingError(
                f"change-event {what} is not Kafka Connect JSON with a schema "
                f'({{"schema": ..., "payload": ...}}): {data[:80]!r}'
            )
        payload = record["payload"]
        if not isinstance(payload, dict):
            raise ChangeDecodingError(f"change-event {what} payload is not a JSON object: {data[:80]!r}")
        return payload
