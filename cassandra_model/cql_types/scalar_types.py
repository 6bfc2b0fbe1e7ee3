"""Types whose values are one scalar: the native types (their behaviour is their ``NativeKind`` row) and
custom Java classes we cannot interpret."""

from __future__ import annotations

from typing import Any

from cassandra_model.cql_types import byte_order, canonical_forms
from cassandra_model.cql_types.cql_type import CqlType, CqlTypeVisitor, NativeJsonReader, NativeSerializer, R
from cassandra_model.cql_types.native_kinds import NATIVE_ALIASES, NATIVE_KINDS, NativeKind


class NativeType(CqlType):
    """A built-in scalar type (``int``, ``text``, ``counter`` ...)."""

    __slots__ = ("_fn", "kind", "name")

    def __init__(self, name: str) -> None:
        kind: NativeKind = NATIVE_KINDS[name]
        super().__init__(kind.fixed_length, False, empty_ok=kind.empty_ok, hashable=True)
        self.name = name
        self.kind = kind
        self._fn = kind.decode

    def cql(self) -> str:
        return self.name

    def __reduce__(self) -> tuple[Any, ...]:
        return (native_type, (self.name,))

    def accept(self, visitor: CqlTypeVisitor[R], *args: Any) -> R:
        return visitor.visit_native(self, *args)

    @property
    def is_counter(self) -> bool:
        return self.name == "counter"

    @property
    def is_text(self) -> bool:
        return self.kind.is_text

    def _decode(self, data: bytes) -> Any:
        return self._fn(data)

    def _serialize(self, value: Any, native: NativeSerializer) -> bytes:
        return native(self, value)

    def _order_encoder(self) -> byte_order.ValueEncoder:
        return self.kind.order

    @property
    def byte_identical(self) -> bool:
        return self.kind.byte_identical

    def _canonical_form(self) -> canonical_forms.CanonicalForm:
        return self.kind.canonical or canonical_forms.same

    def from_driver(self, value: Any) -> Any:
        convert = self.kind.from_driver
        return value if convert is None else convert(value)

    def from_event_json(self, value: Any, native: NativeJsonReader) -> Any:
        return native(self, value)


NATIVE_TYPES: dict[str, NativeType] = {name: NativeType(name) for name in NATIVE_KINDS}
for _alias, _target in NATIVE_ALIASES.items():
    NATIVE_TYPES[_alias] = NATIVE_TYPES[_target]


def native_type(name: str) -> NativeType:
    """The shared NativeType of a name (how a pickled one comes back)."""
    return NATIVE_TYPES[name]


class CustomType(CqlType):
    """A quoted Java class we cannot interpret: values stay opaque bytes, written with a length prefix.

    Variable length is right for any AbstractType that does not override valueLengthIfFixed, which is
    the case for custom types in practice. Ordered as unsigned bytes, JSON as a blob.
    """

    __slots__ = ("class_name",)

    def __init__(self, class_name: str) -> None:
        super().__init__(None, False, empty_ok=True, hashable=True)
        self.class_name = class_name

    def cql(self) -> str:
        return "'" + self.class_name.replace("'", "''") + "'"

    def accept(self, visitor: CqlTypeVisitor[R], *args: Any) -> R:
        return visitor.visit_custom(self, *args)

    def _decode(self, data: bytes) -> bytes:
        return data

    def _serialize(self, value: Any, native: NativeSerializer) -> bytes:
        return bytes(value)

    def _order_encoder(self) -> byte_order.ValueEncoder:
        return byte_order.unsigned_bytes

    @property
    def byte_identical(self) -> bool:
        return True

    def from_event_json(self, value: Any, native: NativeJsonReader) -> Any:
        return native(NATIVE_TYPES["blob"], value)  # opaque bytes: the JSON form is a blob's
