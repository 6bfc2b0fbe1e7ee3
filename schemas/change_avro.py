"""Change events as Avro in the Confluent wire format: the Avro column of the mapping in
``schemas.change_codec``.

The codec generates a table's schemas (``schemas.change_avro_schema``), registers them, writes the
binary form itself (``schemas.change_avro_writer``; tests check it byte for byte against fastavro) and
decodes with the writer's schema from the registry (``schemas.change_avro_reader``). Registration is a
blocking registry call once per TableSchema object; ``await codec.prepare(schema)`` does it in a thread.
"""

from __future__ import annotations

import asyncio
import json
import struct
from dataclasses import dataclass
from typing import Any

from fastavro import parse_schema

from cassandra_model.table_schema import TableSchema
from runtime.config import DecimalHandling
from schemas.change_avro_names import avro_name
from schemas.change_avro_reader import CONFLUENT_FRAME, CONFLUENT_MAGIC, AvroChangeReader
from schemas.change_avro_schema import AvroSchemaBuilder
from schemas.change_avro_writer import RowWriter, schema_writer, write_long, write_row, write_string
from schemas.change_codec import ChangeEncodingError, encode_change_via_envelope
from schemas.change_conversions import RowSpec, convert_row, key_columns, key_decimal_handling
from schemas.change_event import OPS, SOURCE_RECORD, ChangeSource, clean_topic_name
from schemas.registry_client import SchemaRegistryClient
from state.change import RowChange

_write_source = schema_writer(SOURCE_RECORD, "", {})


def without_branches(value: Any) -> Any:
    """A written Avro record with fastavro's union tuple notation ``(branch, value)`` removed (what
    fastavro's validation expects)."""
    if isinstance(value, tuple):
        return without_branches(value[1])
    if isinstance(value, dict):
        return {k: without_branches(v) for k, v in value.items()}
    if isinstance(value, list):
        return [without_branches(v) for v in value]
    return value


@dataclass(slots=True)
class _AvroTable:
    """What one TableSchema object needs for Avro: generated schemas, writers, converters, registry ids."""

    name: str
    key_subject: str
    value_subject: str
    key_schema: dict[str, Any]
    value_schema: dict[str, Any]
    key_json: str
    value_json: str
    key_spec: RowSpec
    row_spec: RowSpec
    key_writer: RowWriter
    row_writer: RowWriter
    value_name: str
    key_header: bytes | None = None
    value_header: bytes | None = None


class AvroChangeCodec:
    """Change events as Avro in the Confluent wire format, schemas registered per table schema version.

    Subjects follow TopicNameStrategy on the clean topic ``<topic_prefix>.<keyspace>.<table>``:
    ``<topic>-key`` and ``<topic>-value``; pass the worker's clean topic prefix (the default is the
    config's default, ``cdc``). Record names start with ``namespace`` (default: the topic
    prefix, each dot-separated part made an Avro name). The first encode of a new TableSchema object
    registers both schemas (a blocking registry call unless ``await prepare(schema)`` did it before);
    after that, encoding touches only caches.
    """

    def __init__(
        self,
        registry: SchemaRegistryClient,
        topic_prefix: str = "cdc",
        *,
        namespace: str | None = None,
        decimal_handling: DecimalHandling = "precise",
    ) -> None:
        clean_topic_name(topic_prefix, "ks", "table")  # validate the prefix early
        self.registry = registry
        self.decimal_handling = decimal_handling
        self.topic_prefix = topic_prefix
        namespace = namespace if namespace is not None else topic_prefix
        if not namespace:
            raise ValueError("the Avro namespace of change events cannot be empty")
        self.namespace = ".".join(avro_name(part) for part in namespace.split("."))
        self._tables: dict[int, tuple[TableSchema, _AvroTable]] = {}
        self._reader = AvroChangeReader(registry)

    # -- schemas

    def _table(self, schema: TableSchema) -> _AvroTable:
        found = self._tables.get(id(schema))
        if found is not None and found[0] is schema:
            return found[1]
        table = self._compile(schema)
        if len(self._tables) > 4096:
            self._tables.clear()
        self._tables[id(schema)] = (schema, table)
        return table

    def _compile(self, schema: TableSchema) -> _AvroTable:
        topic = clean_topic_name(self.topic_prefix, schema.keyspace, schema.table)
        base = (self.namespace, avro_name(schema.keyspace), avro_name(schema.table))
        prefix = ".".join(base)
        try:
            key_schema, key_spec, key_writer = AvroSchemaBuilder(
                key_decimal_handling(self.decimal_handling)
            ).record(f"{prefix}.Key", key_columns(schema), base)
            row_schema, row_spec, row_writer = AvroSchemaBuilder(self.decimal_handling).record(
                f"{prefix}.Value", schema.all_columns(), base
            )
        except TypeError as exc:
            raise ChangeEncodingError(str(exc), table=schema.name) from exc
        value_name = row_schema["name"]
        value_schema = {
            "type": "record",
            "name": f"{prefix}.Envelope",
            "doc": f"A change of a row of Cassandra table {schema.name} (Debezium envelope)",
            "fields": [
                {"name": "before", "type": ["null", row_schema], "default": None},
                {"name": "after", "type": ["null", value_name], "default": None},
                {"name": "op", "type": "string"},
                {"name": "source", "type": SOURCE_RECORD},
                {"name": "ts_ms", "type": "long"},
            ],
        }
        key_schema["doc"] = f"Primary key of a row of Cassandra table {schema.name}"
        try:  # fastavro checks what we generated (names, defaults) once per table schema version
            parse_schema(key_schema)
            parse_schema(value_schema)
        except Exception as exc:  # fastavro raises SchemaParseException, ValueError...
            raise ChangeEncodingError(
                f"generated Avro schema does not parse: {exc}", table=schema.name
            ) from exc
        return _AvroTable(
            name=schema.name,
            key_subject=f"{topic}-key",
            value_subject=f"{topic}-value",
            key_schema=key_schema,
            value_schema=value_schema,
            key_json=json.dumps(key_schema, separators=(",", ":"), ensure_ascii=False),
            value_json=json.dumps(value_schema, separators=(",", ":"), ensure_ascii=False),
            key_spec=key_spec,
            row_spec=row_spec,
            key_writer=key_writer,
            row_writer=row_writer,
            value_name=value_name,
        )

    def key_schema(self, schema: TableSchema) -> dict[str, Any]:
        """The Avro key schema registered for a table (a record named ``...<table>.Key``)."""
        return self._table(schema).key_schema

    def value_schema(self, schema: TableSchema) -> dict[str, Any]:
        """The Avro value schema registered for a table (the ``...<table>.Envelope`` record)."""
        return self._table(schema).value_schema

    def subjects(self, schema: TableSchema) -> tuple[str, str]:
        """The registry subjects (key, value) of a table."""
        table = self._table(schema)
        return table.key_subject, table.value_subject

    def register(self, schema: TableSchema) -> tuple[int, int]:
        """Register the key and value schemas (cached; blocking): their registry ids."""
        table = self._table(schema)
        if table.key_header is None or table.value_header is None:
            key_id = self.registry.register(table.key_subject, table.key_json)
            value_id = self.registry.register(table.value_subject, table.value_json)
            table.key_header = CONFLUENT_FRAME.pack(CONFLUENT_MAGIC, key_id)
            table.value_header = CONFLUENT_FRAME.pack(CONFLUENT_MAGIC, value_id)
        return CONFLUENT_FRAME.unpack(table.key_header)[1], CONFLUENT_FRAME.unpack(table.value_header)[1]

    async def prepare(self, schema: TableSchema) -> None:
        """Register a table's schemas in a worker thread, so later encodes never block the event loop."""
        table = self._table(schema)
        if table.key_header is None or table.value_header is None:
            await asyncio.to_thread(self.register, schema)

    # -- encoding

    def key_record(self, schema: TableSchema, key: dict[str, Any]) -> dict[str, Any]:
        """The record written for a key (Avro field names, primitive values, tuple-notation unions)."""
        return convert_row(self._table(schema).key_spec, key, schema.name)

    def value_record(self, schema: TableSchema, envelope: dict[str, Any]) -> dict[str, Any]:
        """The record written for an envelope (Avro field names, primitive values, tuple-notation unions)."""
        return self._value_record(self._table(schema), envelope)

    def _value_record(self, table: _AvroTable, envelope: dict[str, Any]) -> dict[str, Any]:
        op = envelope["op"]
        if op not in OPS:
            raise ChangeEncodingError(f"unknown op {op!r}", table=table.name)
        before = envelope["before"]
        after = envelope["after"]
        spec = table.row_spec
        name = table.value_name
        return {
            "before": None if before is None else (name, convert_row(spec, before, table.name)),
            "after": None if after is None else (name, convert_row(spec, after, table.name)),
            "op": op,
            "source": envelope["source"],
            "ts_ms": envelope["ts_ms"],
        }

    def encode_key(self, schema: TableSchema, key: dict[str, Any]) -> bytes:
        table = self._table(schema)
        header = table.key_header
        if header is None:
            self.register(schema)
            header = table.key_header
            assert header is not None
        out = bytearray(header)
        write_row(table.key_writer, key, table.name, out)
        return bytes(out)

    def encode_change(
        self, schema: TableSchema, change: RowChange, source: ChangeSource, ts_ms: int
    ) -> tuple[bytes, bytes]:
        return encode_change_via_envelope(self, schema, change, source, ts_ms)

    def encode_value(self, schema: TableSchema, envelope: dict[str, Any]) -> bytes:
        table = self._table(schema)
        header = table.value_header
        if header is None:
            self.register(schema)
            header = table.value_header
            assert header is not None
        op = envelope["op"]
        if op not in OPS:
            raise ChangeEncodingError(f"unknown op {op!r}", table=table.name)
        out = bytearray(header)
        for image in (envelope["before"], envelope["after"]):
            if image is None:
                out.append(0)
            else:
                out.append(2)
                write_row(table.row_writer, image, table.name, out)
        write_string(out, op)
        try:
            _write_source(out, envelope["source"])
            write_long(out, envelope["ts_ms"])
        except (KeyError, TypeError, ValueError, AttributeError, struct.error) as exc:
            raise ChangeEncodingError(f"bad envelope source or ts_ms: {exc!r}", table=table.name) from exc
        return bytes(out)

    # -- decoding

    def decode_key(self, data: bytes) -> dict[str, Any]:
        return self._reader.decode(data, "key")

    def decode_value(self, data: bytes) -> dict[str, Any]:
        return self._reader.decode(data, "value")
