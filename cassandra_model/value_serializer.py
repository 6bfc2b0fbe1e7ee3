"""CQL values to their serialized bytes (native protocol v4; the frozen form for collections and UDTs).

The inverse of the decoder's value reading: the REST API turns a primary key given as JSON into the
partition and clustering bytes the state is keyed by, the bootstrap turns rows read from Cassandra into
cells, and tests build cells from Python values. Each type frames its own values (``CqlType.serialize``);
native values are written by cassandra-driver's serializers, which live here because the merge state
imports the types and must not import the driver.
"""

from __future__ import annotations

from typing import Any

from cassandra.cqltypes import lookup_casstype

from cassandra_model.cql_types import NATIVE_TYPES, CqlType, NativeType

#: the protocol version values are serialized for (v4: the frozen forms the commit log holds too)
_PROTOCOL_VERSION = 4
#: counter cells hold counter contexts (testkit.event_builder.counter_context), and an EmptyType value is
#: empty: neither is serialized from a Python value
_NOT_SERIALIZED = frozenset(("counter", "empty"))
#: cassandra-driver's serializer of each native type, by the type's marshal class
_DRIVER_SERIALIZERS = {
    name: lookup_casstype(t.kind.marshal_class).serialize
    for name, t in NATIVE_TYPES.items()
    if t.name not in _NOT_SERIALIZED
}


def native_bytes(t: NativeType, value: Any) -> bytes:
    """The bytes of a non-null value of a native type (the ``NativeSerializer`` the types take)."""
    serializer = _DRIVER_SERIALIZERS.get(t.name)
    if serializer is None:
        raise TypeError(f"cannot serialize a value of type {t.name}")
    return serializer(value, _PROTOCOL_VERSION)


def serialize(t: CqlType, value: Any) -> bytes:
    """The native-protocol v4 bytes of a Python value of a CQL type (frozen form for collections; set
    elements and map keys in the element type's order). A SerializedValue is written as it is."""
    return t.serialize(value, native_bytes)
