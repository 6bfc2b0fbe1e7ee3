"""Clean topics read the way a consumer of the Confluent ecosystem reads them, none of our code involved.

``read_with_confluent`` runs confluent-kafka's ``DeserializingConsumer`` with its ``AvroDeserializer`` and
``SchemaRegistryClient`` (isolation.level=read_committed) over a whole topic: each record's writer schema
comes from the registry by the id in its frame, or a reader schema given by the caller is resolved
against it (Avro schema resolution, as a consumer pinned to the newest version reads older events).

``ConfluentJsonForm`` turns what fastavro (inside the deserializer) gives back into the clean topics' JSON
form (``schemas.change_codec``), so images compare with ``cdc.verify.oracle.select_rows``. The
normalisation, per CQL type of the column:

- timestamp: fastavro's timestamp-millis gives an aware UTC datetime -> integer milliseconds since the
  epoch (exact timedelta arithmetic, no float);
- date: fastavro's date gives a datetime.date -> days since 1970-01-01;
- uuid, timeuuid: fastavro's uuid gives a UUID -> its lowercase hyphenated text;
- decimal: our record ``{unscaled: big-endian two's complement bytes, scale}`` -> the exact Decimal built
  from sign, digits and exponent (no context rounding) -> ``str``, which keeps the scale;
- blob, custom: bytes -> base64; float, double: NaN and infinities -> "NaN", "Infinity", "-Infinity";
- map with a non-text key: the array of ``{key, value}`` records -> ``[key, value]`` pairs;
- tuple: the ``{f0, f1, ...}`` record -> an array; UDT: the record -> an object by field name;
- everything else (text, ints, boolean, varint and inet text, time nanos, duration record) as decoded.

UDT fields are read under their Avro names: the workloads use plain CQL names, which Avro keeps as they are.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import time
import uuid
from collections.abc import Callable
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
)
from cassandra_model.table_schema import TableSchema

Normalise = Callable[[Any], Any]

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_EPOCH_DAY = datetime.date(1970, 1, 1)
_MILLISECOND = datetime.timedelta(milliseconds=1)


def _millis(v: datetime.datetime) -> int:
    return (v - _EPOCH) // _MILLISECOND


def _days(v: datetime.date) -> int:
    return (v - _EPOCH_DAY).days


def _decimal_text(v: dict[str, Any]) -> str:
    unscaled = int.from_bytes(v["unscaled"], "big", signed=True)
    digits = tuple(int(c) for c in str(abs(unscaled)))
    return str(decimal.Decimal((int(unscaled < 0), digits, -v["scale"])))


def _float_text(v: float) -> float | str:
    if v != v:
        return "NaN"
    if v in (float("inf"), float("-inf")):
        return "Infinity" if v > 0 else "-Infinity"
    return v


def _base64(v: bytes) -> str:
    return base64.b64encode(v).decode("ascii")


_NATIVE: dict[str, Normalise] = {
    "timestamp": _millis,
    "date": _days,
    "uuid": str,
    "timeuuid": str,
    "decimal": _decimal_text,
    "blob": _base64,
    "float": _float_text,
    "double": _float_text,
}


def _nullable(inner: Normalise) -> Normalise:
    return lambda v: None if v is None else inner(v)


class ConfluentJsonForm(CqlTypeVisitor[Normalise]):
    """The JSON form of a value as confluent-kafka's AvroDeserializer returns it (module notes)."""

    __slots__ = ()

    def of(self, t: CqlType) -> Normalise:
        return _nullable(t.accept(self))

    def visit_native(self, t: NativeType, *args: Any) -> Normalise:
        return _NATIVE.get(t.name, lambda v: v)

    def visit_custom(self, t: CustomType, *args: Any) -> Normalise:
        return _base64

    def visit_list(self, t: ListType | SetType | VectorType, *args: Any) -> Normalise:
        element = self.of(t.element)
        return lambda v: [element(x) for x in v]

    visit_set = visit_list
    visit_vector = visit_list

    def visit_map(self, t: MapType, *args: Any) -> Normalise:
        key, value = self.of(t.key), self.of(t.value)
        if t.key.is_text:
            return lambda v: {k: value(x) for k, x in v.items()}
        return lambda v: [[key(e["key"]), value(e["value"])] for e in v]

    def visit_tuple(self, t: TupleType, *args: Any) -> Normalise:
        elements = [self.of(e) for e in t.elements]
        return lambda v: [n(v[f"f{i}"]) for i, n in enumerate(elements)]

    def visit_user_type(self, t: UserType, *args: Any) -> Normalise:
        fields = [(name, self.of(ft)) for name, ft in zip(t.field_names, t.field_types, strict=True)]
        return lambda v: {name: n(v[name]) for name, n in fields}


def image_normaliser(schema: TableSchema) -> Callable[[dict[str, Any] | None], dict[str, Any] | None]:
    """Turns a decoded row record (key or image) of ``schema`` into its JSON form. Columns dropped since
    keep their own type; columns the record does not carry (an image written before the column was
    added) are left out, not invented."""
    form = ConfluentJsonForm()
    every = [*schema.all_columns(), *(d.as_column() for d in schema.dropped_columns.values())]
    columns = [(c.name, form.of(c.type)) for c in every]

    def normalise(record: dict[str, Any] | None) -> dict[str, Any] | None:
        if record is None:
            return None
        return {name: n(record[name]) for name, n in columns if name in record}

    return normalise


@dataclass(slots=True, frozen=True)
class ConfluentRecord:
    """One record as confluent-kafka's deserializers gave it (a tombstone's value is None)."""

    partition: int
    offset: int
    key: dict[str, Any]
    value: dict[str, Any] | None


def read_with_confluent(
    bootstrap: str,
    registry_url: str,
    topic: str,
    *,
    reader_schema: str | None = None,
    timeout_s: float = 60.0,
) -> list[ConfluentRecord]:
    """Every committed record of ``topic`` from its beginning to its end, decoded by confluent-kafka.

    A record that does not decode raises the deserializer's error (nothing is skipped); values are read
    with ``reader_schema`` when given, else with each record's writer schema."""
    from confluent_kafka import OFFSET_BEGINNING, DeserializingConsumer, KafkaError, TopicPartition
    from confluent_kafka.error import ConsumeError
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer

    registry = SchemaRegistryClient({"url": registry_url})
    consumer = DeserializingConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"confluent-reader-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "key.deserializer": AvroDeserializer(registry),
            "value.deserializer": AvroDeserializer(registry, schema_str=reader_schema),
        }
    )
    try:
        partitions = list(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        assert partitions, f"topic {topic} has no partitions (does it exist?)"
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        pending = set(partitions)
        records: list[ConfluentRecord] = []
        deadline = time.monotonic() + timeout_s
        while pending:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{topic}: partitions {sorted(pending)} not read to their end in {timeout_s:.0f} s "
                    f"({len(records)} records so far)"
                )
            try:
                message = consumer.poll(1.0)
            except ConsumeError as exc:  # the deserializing consumer raises every event, EOF included
                if exc.code != KafkaError._PARTITION_EOF or exc.kafka_message is None:
                    raise
                pending.discard(exc.kafka_message.partition())
                continue
            if message is None:
                continue
            records.append(
                ConfluentRecord(message.partition(), message.offset(), message.key(), message.value())
            )
        return records
    finally:
        consumer.close()
