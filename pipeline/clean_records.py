"""Clean-topic records of every encoding as the JSON encoding's key and value text, in Spark tasks.

The lake job parses JSON change events in Spark (``lake_merge``). Clean topics the workers write as
``json_schema`` (Kafka Connect JSON with a schema) or ``avro`` (the Confluent wire format: byte 0, the
4-byte schema id, the Avro body) are decoded here first, in Python, by the workers' own codecs, and their
keys and events put in the JSON encoding's form (``schemas.change_json_form``): the Delta tables then
come out the same whatever the encoding, ``_cdc_key`` included. Keys are decoded for every record (two
encodings of one key must meet in the batch's latest-record window), values only for the latest record
of each key.

Avro writer schemas come from the registry once per schema id and process (each Python worker keeps
its client, and the client its answers, from task to task and batch to batch); a record of a schema id
the registry does not know, or a record that is not of the configured encoding, stops the batch with an
error naming the topic, partition and offset, before anything is written to the lake.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cassandra_model.table_schema import TableSchema
from pipeline.errors import PipelineError
from schemas.change_codec import ChangeDecodingError
from schemas.change_json_form import JsonFormRows
from schemas.registry_client import HttpSchemaRegistryClient, SchemaRegistryError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

ENCODINGS = ("json", "json_schema", "avro")
_FRAME = struct.Struct(">bI")
#: this process's registry clients, by URL: each caches the schemas it fetched, once per schema id
_REGISTRIES: dict[str, HttpSchemaRegistryClient] = {}


def describe_record(data: bytes | None) -> tuple[str, str | None]:
    """What a clean record's bytes look like, and the encoding setting that reads them (None: none)."""
    if not data:
        return "empty", None
    if data[0] == 0 and len(data) >= 5:
        return f"Avro in the Confluent wire format (schema id {_FRAME.unpack_from(data)[1]})", "avro"
    head = data[:64].lstrip()
    if head.startswith(b'{"schema"') or head.startswith(b'{ "schema"'):
        return "Kafka Connect JSON with a schema", "json_schema"
    if head.startswith(b"{"):
        return "JSON", "json"
    return f"neither JSON nor Avro ({data[:16]!r})", None


def wrong_encoding(what: str, data: bytes | None, encoding: str) -> str:
    """Why a record did not decode as ``encoding``, and what to set."""
    looks, reads = describe_record(data)
    if reads is not None and reads != encoding:
        hint = f"set pipeline.encoding to {reads!r} (the workers' worker.encoding)"
    else:
        hint = "is something else writing to the clean topic?"
    return (
        f"the record's {what} is {looks}, not a change event of encoding {encoding!r} (config "
        f"pipeline.encoding, else worker.encoding); {hint}"
    )


@dataclass(slots=True, frozen=True)
class CleanTopics:
    """What a task needs to read the clean topics: their encoding, the registry, each topic's table."""

    encoding: str
    registry_url: str | None
    tables: dict[str, TableSchema]
    """Clean topic name -> the newest schema of its table."""


class CleanRecordReader:
    """Keys and values of one encoding to the JSON encoding's text (one per task; clients per process)."""

    def __init__(self, topics: CleanTopics) -> None:
        self.topics = topics
        self.rows: dict[str, JsonFormRows] = {
            topic: JsonFormRows(schema, topics.encoding) for topic, schema in topics.tables.items()
        }
        if topics.encoding == "avro":
            from schemas.change_avro_reader import AvroChangeReader

            assert topics.registry_url is not None
            registry = _REGISTRIES.get(topics.registry_url)
            if registry is None:
                registry = _REGISTRIES[topics.registry_url] = HttpSchemaRegistryClient(topics.registry_url)
            reader = AvroChangeReader(registry)
            self._decode = reader.decode
        else:
            from schemas.change_connect_json import ConnectJsonChangeCodec

            codec = ConnectJsonChangeCodec()
            self._decode = lambda data, what: (
                codec.decode_key(data) if what == "key" else codec.decode_value(data)
            )

    def _decoded(self, topic: str, partition: int, offset: int, data: bytes, what: str) -> dict[str, Any]:
        try:
            return self._decode(data, what)  # type: ignore[no-any-return]
        except SchemaRegistryError as exc:
            schema_id = _FRAME.unpack_from(data)[1]
            raise PipelineError(
                f"lake: {topic} partition {partition} offset {offset}: the {what}'s schema id {schema_id} "
                f"cannot be read from the schema registry {exc.url} (config pipeline.schema_registry_url, "
                f"else worker.schema_registry_url): {exc}; is it the registry the workers write to?"
            ) from None
        except ChangeDecodingError as exc:
            _, reads = describe_record(data)
            reason = (
                wrong_encoding(what, data, self.topics.encoding)
                if reads != self.topics.encoding
                else f"it does not decode: {exc}"
            )
            raise PipelineError(f"lake: {topic} partition {partition} offset {offset}: {reason}") from None

    def key_text(self, topic: str, partition: int, offset: int, key: bytes | None) -> str:
        rows = self.rows.get(topic)
        if rows is None or key is None:  # a topic of no known table: the job skips it
            return ""
        return rows.key_text(self._decoded(topic, partition, offset, key, "key"))

    def value_text(self, topic: str, partition: int, offset: int, value: bytes | None) -> str | None:
        rows = self.rows.get(topic)
        if rows is None or value is None:  # a tombstone
            return None
        return rows.envelope_text(self._decoded(topic, partition, offset, value, "value"))


def _converted(records: DataFrame, topics: CleanTopics, columns: tuple[str, str, str, str]) -> DataFrame:
    """``records`` with one column (the last of ``columns``: key or value) in the JSON encoding's text;
    the others name its topic, partition and offset, for errors."""
    from pyspark.sql.types import StringType, StructField, StructType

    column = columns[3]
    names = records.columns
    where = tuple(names.index(c) for c in columns)
    fields = [StructField(column, StringType()) if f.name == column else f for f in records.schema.fields]

    def convert(rows: Iterator[Any]) -> Iterator[list[Any]]:
        reader = CleanRecordReader(topics)
        text = reader.key_text if column == "key" else reader.value_text
        topic, partition, offset, data = where
        for row in rows:
            values = list(row)
            raw = values[data]
            values[data] = text(
                values[topic], values[partition], values[offset], None if raw is None else bytes(raw)
            )
            yield values

    return records.sparkSession.createDataFrame(records.rdd.mapPartitions(convert), StructType(fields))


def as_json_keys(records: DataFrame, topics: CleanTopics) -> DataFrame:
    """The batch's Kafka records with ``key`` the JSON encoding's key text (decoded from
    ``topics.encoding``)."""
    return _converted(records, topics, ("topic", "partition", "offset", "key"))


def as_json_values(latest: DataFrame, topics: CleanTopics) -> DataFrame:
    """``lake_merge.latest_records`` with ``value`` the JSON encoding's change event text (tombstones
    stay null)."""
    from pipeline.lake_schema import OFFSET_COLUMN, PARTITION_COLUMN

    return _converted(latest, topics, ("topic", PARTITION_COLUMN, OFFSET_COLUMN, "value"))
