"""Typed Faust records of clean-topic change events, and the Faust topic that yields them.

A clean topic ``<prefix>.<keyspace>.<table>`` carries, per change of a row, the Debezium envelope
``{before, after, op, source, ts_ms}`` keyed by the row's primary key, and after a delete a tombstone
(same key, null value) so that compaction forgets the row. ``change_topic`` gives a Faust application
that topic with everything set the way these records need:

- keys and values decoded by the worker's own codecs (``consumers.faust_codec``), for every encoding;
- values as ``ChangeEvent`` records, and tombstones as ``None`` values (``allow_empty``), not as errors;
- with the table's ``TableSchema``, ``before``/``after`` and the key as records generated from the table's
  columns (``row_model``, ``key_model``), so a row's columns are attributes with their types.

The application must read with isolation ``read_committed``: each worker batch is one Kafka transaction,
and a batch that does not commit is merged again, so its records must never be seen. A plain
``faust.App`` reads uncommitted records; ``consumers.faust_read_committed.ReadCommittedApp`` does not
(see ``examples/faust_consumer.py``).

    app = ReadCommittedApp("orders-indexer", broker="kafka://kafka:9092")
    orders = change_topic(app, "cdc.shop.orders", "avro", registry_url="http://registry:8081")

    @app.agent(orders)
    async def index(stream):
        async for event in stream.events():
            if event.value is None:  # tombstone: the row event.key is gone for good
                continue
            change = event.value  # a ChangeEvent
            ...

Column values are in the form ``schemas.change_codec`` documents for the encoding (timestamps as epoch
milliseconds, blobs as base64 text in JSON and bytes in Avro, tuples as arrays in JSON and records in Avro
and ``json_schema``...); the generated records annotate each column with that Python type
(``python_type``). Faust does not validate or convert them.
"""

from __future__ import annotations

import keyword
import re
import types
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

import faust
from faust.models.fields import FieldDescriptor

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
from cassandra_model.table_schema import ColumnSchema, TableSchema
from consumers.faust_codec import ENCODINGS, ChangeDecoder, ChangeEventCodec, change_decoder
from schemas.change_connect_json import ConnectSchemaBuilder


class ChangeEvent(faust.Record, include_metadata=False):
    """One change of a row: the Debezium envelope of a clean-topic value.

    ``op`` is ``c`` (create), ``u`` (update), ``d`` (delete) or ``r`` (a bootstrap read). ``before`` and
    ``after`` are full rows by CQL column name (None for a create's before and a delete's after).
    ``source`` says where the change came from (``schemas/change_source.avsc``); ``ts_ms`` is when the
    worker emitted it.
    """

    op: str
    source: dict[str, Any]
    ts_ms: int
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None

    @property
    def row(self) -> Any:
        """The row as it is now: ``after``, or for a delete the row it removed (``before``)."""
        return self.after if self.after is not None else self.before

    @property
    def is_create(self) -> bool:
        return self.op == "c"

    @property
    def is_update(self) -> bool:
        return self.op == "u"

    @property
    def is_delete(self) -> bool:
        return self.op == "d"

    @property
    def is_read(self) -> bool:
        """A row that existed before CDC was turned on, read by the bootstrap (``op`` ``r``)."""
        return self.op == "r"

    @property
    def is_expiry(self) -> bool:
        """Made by TTLs running out rather than by a write (then ``write_time_us`` may be None)."""
        return bool(self.source.get("expired"))

    @property
    def write_time_us(self) -> int | None:
        """Cassandra's write timestamp of the change, in microseconds."""
        return self.source.get("write_time_us")

    def changed_columns(self) -> set[str]:
        """Columns whose value differs between ``before`` and ``after`` (a missing image counts as all
        nulls): for a create its non-null columns, for a delete those of the row it removed."""
        before = as_dict(self.before) or {}
        after = as_dict(self.after) or {}
        return {name for name in before.keys() | after.keys() if before.get(name) != after.get(name)}

    def as_envelope(self) -> dict[str, Any]:
        """The documented envelope ``{before, after, op, source, ts_ms}``, rows as dicts by CQL name
        (e.g. to forward the change, or to print it as JSON)."""
        return {
            "before": as_dict(self.before),
            "after": as_dict(self.after),
            "op": self.op,
            "source": self.source,
            "ts_ms": self.ts_ms,
        }


def as_dict(row: Any) -> dict[str, Any] | None:
    """A key or row as a dict by CQL column name, whether a generated record or already a dict."""
    if row is None:
        return None
    if isinstance(row, faust.Record):
        fields = row._options.fields
        # columns the table gained after the model was built are attributes of their own name
        extra = {k: v for k, v in vars(row).items() if k not in fields and not _is_dunder(k)}
        return {**row.asdict(), **extra}
    return dict(row)


def _is_dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


# -- Python types of column values, per encoding (the mapping table of schemas.change_codec)

_JSON_SCALARS: dict[str, Any] = dict(
    every_native(
        {
            "ascii": str,
            "text": str,
            "boolean": bool,
            "tinyint": int,
            "smallint": int,
            "int": int,
            "bigint": int,
            "counter": int,
            "varint": str,
            "float": float | str,  # NaN and the infinities are strings in JSON
            "double": float | str,
            "decimal": str,
            "date": int,
            "time": int,
            "timestamp": int,
            "uuid": str,
            "timeuuid": str,
            "inet": str,
            "duration": dict[str, int],
            "blob": str,
            "empty": type(None),
        },
        "the Python types of JSON change events",
    )
)
_AVRO_SCALARS: dict[str, Any] = {
    **_JSON_SCALARS,
    "float": float,
    "double": float,
    "decimal": dict[str, Any],  # {"unscaled": bytes, "scale": int}
    "blob": bytes,
}


class _PythonTypes(CqlTypeVisitor[Any]):
    """The Python type of a decoded non-null value, per kind of CQL type, for one encoding."""

    __slots__ = ("encoding", "scalars")

    def __init__(self, encoding: str) -> None:
        _check_encoding(encoding)
        self.encoding = encoding
        self.scalars = _AVRO_SCALARS if encoding == "avro" else _JSON_SCALARS

    def visit_native(self, t: NativeType, *args: Any) -> Any:
        return self.scalars[t.name]

    def visit_custom(self, t: CustomType, *args: Any) -> Any:
        return self.scalars["blob"]

    def visit_list(self, t: ListType | SetType | VectorType, *args: Any) -> Any:
        return list[t.element.accept(self)]  # type: ignore[misc]

    visit_set = visit_list
    visit_vector = visit_list

    def visit_map(self, t: MapType, *args: Any) -> Any:
        value = t.value.accept(self)
        if t.key.is_text or (self.encoding == "json_schema" and _connect_string(t.key)):
            return dict[str, value]  # type: ignore[valid-type]
        # JSON: [key, value] pairs; Avro: Entry records {"key", "value"}
        return list[dict[str, Any]] if self.encoding == "avro" else list[list[Any]]

    def visit_tuple(self, t: TupleType, *args: Any) -> Any:
        # JSON: an array; Avro and Kafka Connect: a record {"f0", "f1", ...}
        return list[Any] if self.encoding == "json" else dict[str, Any]

    def visit_user_type(self, t: UserType, *args: Any) -> Any:
        return dict[str, Any]


def _connect_string(t: CqlType) -> bool:
    """Kafka Connect JSON writes a map whose keys are Connect strings as an object."""
    return ConnectSchemaBuilder().schema_of(t, (), False)["type"] == "string"


def python_type(t: CqlType, encoding: str = "json") -> Any:
    """The Python type of a non-null value of CQL type ``t`` in a decoded change event of ``encoding``."""
    return t.accept(_PythonTypes(encoding))


def _check_encoding(encoding: str) -> None:
    if encoding not in ENCODINGS:
        raise ValueError(f"clean-topic encoding {encoding!r} is not one of {', '.join(ENCODINGS)}")


# -- records generated from a table schema

#: names a column cannot have as a record attribute: Faust's own attributes and methods
_RESERVED = frozenset(dir(faust.Record))


def _attribute_names(columns: Iterable[ColumnSchema]) -> dict[str, str]:
    """A Python attribute name per column: the CQL name where it can be one, else a close identifier
    (``"order"`` stays, ``"from"`` becomes ``from_``, ``"Unit Price"`` ``Unit_Price``)."""
    names: dict[str, str] = {}
    taken: set[str] = set()
    for column in columns:
        name = re.sub(r"\W", "_", column.name)
        if not name.isidentifier() or name.startswith("__"):  # a digit first; Python's private names
            name = f"c_{name}"
        while keyword.iskeyword(name) or name in _RESERVED or name in taken:
            name = f"{name}_"
        taken.add(name)
        names[column.name] = name
    return names


def _class_name(schema: TableSchema, suffix: str) -> str:
    words = re.split(r"[^0-9A-Za-z]+", schema.table)
    name = "".join(w[:1].upper() + w[1:] for w in words if w) + suffix
    return name if name.isidentifier() else f"T{name}"


def _columns_record(
    schema: TableSchema, columns: list[ColumnSchema], encoding: str, suffix: str
) -> type[faust.Record]:
    types_of = _PythonTypes(encoding)
    attributes = _attribute_names(columns)
    annotations: dict[str, Any] = {}
    defaults: dict[str, Any] = {}
    for column in columns:
        attribute = attributes[column.name]
        annotations[attribute] = column.type.accept(types_of) | None
        # every column may be null (clustering columns of the static-only row too), and a column the
        # table gains or loses later must not break decoding: all default to None
        if attribute == column.name:
            defaults[attribute] = None
        else:
            defaults[attribute] = FieldDescriptor(
                required=False, default=None, input_name=column.name, output_name=column.name
            )

    def body(namespace: dict[str, Any]) -> None:
        namespace["__annotations__"] = annotations
        namespace["__doc__"] = (
            f"A {suffix.lower()} of Cassandra table {schema.name} ({encoding} clean topic)."
        )
        namespace["__module__"] = __name__
        namespace.update(defaults)

    return types.new_class(
        _class_name(schema, suffix),
        (faust.Record,),
        {"namespace": f"cdc.consumers.{encoding}.{schema.name}.{suffix}", "include_metadata": False},
        body,
    )


@lru_cache(maxsize=1024)
def row_model(schema: TableSchema, encoding: str = "json") -> type[faust.Record]:
    """A ``faust.Record`` class of a table's rows as change events of ``encoding`` carry them.

    One attribute per column (named as the column, see ``_attribute_names`` for names Python cannot
    use; ``asdict()`` gives CQL names again), annotated with its decoded type, defaulting to None.
    Columns added to the table later are kept as extra attributes; build the model of the new schema
    version to have them typed. One class per TableSchema object and encoding (cached).
    """
    return _columns_record(schema, schema.all_columns(), encoding, "Row")


@lru_cache(maxsize=1024)
def key_model(schema: TableSchema, encoding: str = "json") -> type[faust.Record]:
    """A ``faust.Record`` class of a table's clean-topic keys: partition key and clustering columns."""
    return _columns_record(schema, [*schema.partition_key, *schema.clustering], encoding, "Key")


@lru_cache(maxsize=1024)
def change_event_model(schema: TableSchema, encoding: str = "json") -> type[ChangeEvent]:
    """A ``ChangeEvent`` subclass whose ``before`` and ``after`` are ``row_model`` records."""
    row = row_model(schema, encoding)

    def body(namespace: dict[str, Any]) -> None:
        namespace["__annotations__"] = {"before": row | None, "after": row | None}
        namespace["__doc__"] = f"A change of a row of Cassandra table {schema.name}."
        namespace["__module__"] = __name__
        namespace.update(before=None, after=None)

    return types.new_class(
        _class_name(schema, "Change"),
        (ChangeEvent,),
        {"namespace": f"cdc.consumers.{encoding}.{schema.name}.Change", "include_metadata": False},
        body,
    )


def change_topic(
    app: faust.App,
    topic: str,
    encoding: str = "json",
    *,
    registry_url: str | None = None,
    schema: TableSchema | None = None,
    decoder: ChangeDecoder | None = None,
) -> faust.TopicT:
    """The Faust topic of a clean topic: keys and values decoded by the worker's codec for ``encoding``
    (``registry_url``: the workers' schema registry, for ``avro``; or ``decoder``, e.g. one Avro codec
    shared by several topics), values as ``ChangeEvent`` (with ``schema``: ``change_event_model``, and
    keys as ``key_model``; without it keys are dicts), a tombstone as the value None."""
    if decoder is None:
        decoder = change_decoder(encoding, registry_url)
    return app.topic(
        topic,
        key_type=None if schema is None else key_model(schema, encoding),
        value_type=ChangeEvent if schema is None else change_event_model(schema, encoding),
        key_serializer=ChangeEventCodec(decoder=decoder, part="key"),
        value_serializer=ChangeEventCodec(decoder=decoder, part="value"),
        allow_empty=True,
    )
