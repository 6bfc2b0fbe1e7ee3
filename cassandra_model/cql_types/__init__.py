"""CQL types: parse type strings, know their commit-log layout, and carry every codec, conversion and order
of their values.

Why our own: cassandra-driver parses Java class names only (not ``map<text, int>``), and the mutation
decoder needs two facts per type that the driver does not expose: whether a column is multi-cell (written
as one cell per element, with a path) and whether its value is written without a length prefix in the
commit log (format notes §7.10, §7.12). Values use the native-protocol v4+ serialization.

One place per type. Each kind of type is a class (``NativeType``, ``CustomType``, ``ListType``,
``SetType``, ``MapType``, ``VectorType``, ``TupleType``, ``UserType``) that carries, as methods, what the
rest of the system does with its values: ``decode``/``serialize`` (bytes), ``order_encoder`` and
``byte_identical`` (Cassandra's order as bytes), ``canonical`` (one form of values that compare equal),
``from_driver`` (cassandra-driver's values), ``from_event_json`` (the clean topics' JSON form), ``to_json``
(dumps), ``cql_literal``, and the layout of multi-cell columns (``cell_layout``, ``path_type``,
``cell_value_type``, ``element_cells``, ``assemble``). A native type's behaviour is one ``NativeKind``
row (``native_kinds``). So a new CQL type is added in one place, and callers call methods instead of
testing classes.

The merge state imports this package and may not import cassandra-driver, so where a method needs the
driver for NATIVE values (its serializers, its Date and Duration, its CQL literals), the caller passes
that leaf in (``NativeSerializer``, ``NativeJsonReader``, ``LiteralWriter``) and the type does the rest:
``cassandra_model.value_serializer.serialize(t, v)`` is ``t.serialize(v, native_bytes)``.

What cannot live in the model (Spark SQL types, Avro schemas and converters, which need their upper
layer's libraries and formats) is written as one ``CqlTypeVisitor`` per concern: ``t.accept(visitor)``
calls ``visitor.visit_list(t)`` and so on. The visitor's methods are all abstract, so a visitor that does
not handle a kind of type cannot even be instantiated: a new type fails loudly at start-up in every
concern that has not learnt it, instead of falling through an ``isinstance`` chain at run time. Tables
of an upper layer keyed by native type name pass through ``every_native``, which fails the same way.

Decoded Python values: text/ascii -> str, blob/custom -> bytes, integers/counter -> int, float/double ->
float, decimal -> Decimal, date -> datetime.date (int days since 1970 when out of Python's range), time ->
CqlTime, timestamp -> aware UTC datetime (int ms when out of range), uuid/timeuuid -> UUID, inet ->
ipaddress, duration -> Duration, list/set/vector -> list (sets keep Cassandra's element order), map -> dict
(a list of (key, value) tuples when the key type is not hashable), tuple -> tuple, UDT -> dict by field
name. An empty value of a type for which "empty" is not a value (numbers, uuids, collections...) -> None.

Modules: ``values`` (CqlTime, Duration...), ``framing`` (vints, length prefixes), ``native_decoders``,
``byte_order``, ``canonical_forms``, ``native_kinds``, ``cql_type`` (the base, the visitor),
``scalar_types``, ``collection_types``, ``record_types``, ``type_parser``, ``json_form``.
"""

from cassandra_model.cql_types.collection_types import ListType, MapType, SetType, VectorType
from cassandra_model.cql_types.cql_type import (
    CellLayout,
    CqlType,
    CqlTypeVisitor,
    LiteralWriter,
    NativeJsonReader,
    NativeSerializer,
    UdtResolver,
)
from cassandra_model.cql_types.framing import (
    VINT_EXTRA,
    read_signed_vint,
    read_sized_element,
    read_unsigned_vint,
)
from cassandra_model.cql_types.json_form import to_json
from cassandra_model.cql_types.native_decoders import counter_shards
from cassandra_model.cql_types.native_kinds import every_native
from cassandra_model.cql_types.record_types import TupleType, UserType
from cassandra_model.cql_types.scalar_types import NATIVE_TYPES, CustomType, NativeType
from cassandra_model.cql_types.type_parser import parse_cql_type
from cassandra_model.cql_types.values import CounterShard, CqlTime, Duration, SerializedValue

__all__ = [
    "NATIVE_TYPES",
    "VINT_EXTRA",
    "CellLayout",
    "CounterShard",
    "CqlTime",
    "CqlType",
    "CqlTypeVisitor",
    "CustomType",
    "Duration",
    "ListType",
    "LiteralWriter",
    "MapType",
    "NativeJsonReader",
    "NativeSerializer",
    "NativeType",
    "SerializedValue",
    "SetType",
    "TupleType",
    "UdtResolver",
    "UserType",
    "VectorType",
    "counter_shards",
    "every_native",
    "parse_cql_type",
    "read_signed_vint",
    "read_sized_element",
    "read_unsigned_vint",
    "to_json",
]
