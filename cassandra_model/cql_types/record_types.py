"""Records of fields: ``tuple<...>`` (frozen, but for the multi-cell tuples of dropped UDT columns) and
user-defined types. Non-frozen ones write one cell per field, with the 2-byte field index as path."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

from cassandra_model.cql_types import byte_order, canonical_forms
from cassandra_model.cql_types.cql_type import (
    CellLayout,
    CqlType,
    CqlTypeVisitor,
    LiteralWriter,
    NativeJsonReader,
    NativeSerializer,
    R,
    decode_nested,
    decode_nullable,
    from_driver_nullable,
    serialize_nullable,
)
from cassandra_model.cql_types.framing import read_fields, sized
from cassandra_model.cql_types.json_form import plain_json, to_json
from cassandra_model.cql_types.native_decoders import exact
from cassandra_model.errors import SchemaError

_IDENT_SAFE = re.compile(r"[a-z_][a-z0-9_]*\Z")


def quote_ident(name: str) -> str:
    """A CQL identifier, quoted only when it needs to be."""
    return name if _IDENT_SAFE.match(name) else '"' + name.replace('"', '""') + '"'


def _field_index(path: bytes, count: int) -> int:
    exact(path, 2, "field index path")
    index = int.from_bytes(path, "big")
    if index >= count:
        raise ValueError(f"field index {index} beyond the {count} known fields")
    return index


def field_path(index: int) -> bytes:
    """The cell path of a field of a multi-cell record."""
    return index.to_bytes(2, "big")


class _Record(CqlType):
    """Fields by position: framing, order, multi-cell paths (subclasses say what the fields are)."""

    __slots__ = ()
    complex_layout = CellLayout.FIELDS
    field_types: tuple[CqlType, ...]

    @property
    def components(self) -> tuple[CqlType, ...]:
        return self.field_types

    def _items(self, data: bytes, what: str) -> list[Any]:
        types = self.field_types
        items = read_fields(data, len(types), what)
        items += [None] * (len(types) - len(items))
        return [decode_nullable(t, item) for t, item in zip(types, items, strict=True)]

    def _order_encoder(self) -> byte_order.ValueEncoder:
        return byte_order.fields([t.order_encoder() for t in self.field_types])

    @property
    def byte_identical(self) -> bool:
        return False  # trailing null fields make different bytes compare equal

    def _canonical_form(self) -> canonical_forms.CanonicalForm:
        return canonical_forms.fields([t.canonical_form() or canonical_forms.same for t in self.field_types])

    def cell_value_type(self, path: bytes) -> CqlType | None:
        types = self.field_types
        index = int.from_bytes(path, "big") if len(path) == 2 else -1
        return types[index] if 0 <= index < len(types) else None

    def _field(self, path: bytes) -> int:
        return self._wrap_cell(_field_index, path, len(self.field_types))


class TupleType(_Record):
    """``tuple<A, B, ...>``; frozen, except the multi-cell tuples Cassandra keeps for dropped UDT columns."""

    __slots__ = ("elements",)

    def __init__(self, elements: tuple[CqlType, ...], *, multi_cell: bool = False) -> None:
        hashable = all(e.hashable for e in elements)
        super().__init__(None, multi_cell, empty_ok=False, hashable=hashable and not multi_cell)
        self.elements = tuple(e.freeze() for e in elements)

    @property
    def field_types(self) -> tuple[CqlType, ...]:
        return self.elements

    def freeze(self) -> TupleType:
        return self if not self.multi_cell else TupleType(self.elements)

    def cql(self) -> str:
        inner = "tuple<" + ", ".join(e.cql() for e in self.elements) + ">"
        return inner if self.multi_cell else f"frozen<{inner}>"

    def accept(self, visitor: CqlTypeVisitor[R], *args: Any) -> R:
        return visitor.visit_tuple(self, *args)

    def _decode(self, data: bytes) -> tuple[Any, ...]:
        return tuple(self._items(data, "tuple"))

    def _serialize(self, value: Any, native: NativeSerializer) -> bytes:
        elements = zip(self.elements, value, strict=True)
        return b"".join(sized(serialize_nullable(e, v, native)) for e, v in elements)

    def from_driver(self, value: Any) -> tuple[Any, ...]:
        return tuple(from_driver_nullable(e, v) for e, v in zip(self.elements, value, strict=True))

    def from_event_json(self, value: Any, native: NativeJsonReader) -> tuple[Any, ...]:
        elements = zip(self.elements, value, strict=True)
        return tuple(None if v is None else e.from_event_json(v, native) for e, v in elements)

    def to_json(self, value: Any) -> Any:
        if isinstance(value, list | tuple):
            types = self.elements
            return [to_json(v, types[i] if i < len(types) else None) for i, v in enumerate(value)]
        return plain_json(value)

    def cql_literal(self, value: Any, literal: LiteralWriter) -> str:
        """``(a, b)``: cassandra-driver's encoder would write a Python tuple as a list."""
        if not isinstance(value, tuple):
            return literal(value)
        elements = zip(self.elements, value, strict=True)
        return "(" + ", ".join(e.cql_literal(v, literal) for e, v in elements) + ")"

    def element_cells(self, value: Any, native: NativeSerializer) -> list[tuple[bytes | None, bytes | None]]:
        if not self.multi_cell:
            return super().element_cells(value, native)
        elements = enumerate(zip(self.elements, value, strict=True))
        return [(field_path(i), serialize_nullable(e, v, native)) for i, (e, v) in elements]

    def decode_path(self, path: bytes) -> int:
        return self._field(path)

    def decode_cell_value(self, path: bytes, value: bytes) -> Any:
        return self._wrap_cell(decode_nested, self.elements[self._field(path)], value)

    def assemble(self, cells: Iterable[tuple[bytes, bytes]]) -> tuple[Any, ...]:
        out: list[Any] = [None] * len(self.elements)
        for path, value in cells:
            out[self.decode_path(path)] = self.decode_cell_value(path, value)
        return tuple(out)


class UserType(_Record):
    """A user-defined type. Non-frozen UDT cells carry the field index as a 2-byte path."""

    __slots__ = ("field_names", "field_types", "keyspace", "name")

    def __init__(
        self,
        keyspace: str,
        name: str,
        field_names: tuple[str, ...],
        field_types: tuple[CqlType, ...],
        *,
        frozen: bool,
    ) -> None:
        if len(field_names) != len(field_types):
            raise SchemaError(f"type {keyspace}.{name}: {len(field_names)} names, {len(field_types)} types")
        super().__init__(None, not frozen, empty_ok=False, hashable=False)
        self.keyspace = keyspace
        self.name = name
        self.field_names = tuple(field_names)
        self.field_types = tuple(t.freeze() for t in field_types)

    def freeze(self) -> UserType:
        if not self.multi_cell:
            return self
        return UserType(self.keyspace, self.name, self.field_names, self.field_types, frozen=True)

    def cql(self) -> str:
        name = quote_ident(self.name)
        return name if self.multi_cell else f"frozen<{name}>"

    def accept(self, visitor: CqlTypeVisitor[R], *args: Any) -> R:
        return visitor.visit_user_type(self, *args)

    def user_types(self) -> Iterator[UserType]:
        yield from super().user_types()
        yield self

    def _decode(self, data: bytes) -> dict[str, Any]:
        return dict(zip(self.field_names, self._items(data, f"type {self.name}"), strict=True))

    def _serialize(self, value: Any, native: NativeSerializer) -> bytes:
        fields = dict(value)
        return b"".join(
            sized(serialize_nullable(ft, fields.get(n), native))
            for n, ft in zip(self.field_names, self.field_types, strict=True)
        )

    def from_driver(self, value: Any) -> dict[str, Any]:
        return {
            n: from_driver_nullable(ft, getattr(value, n, None))
            for n, ft in zip(self.field_names, self.field_types, strict=True)
        }

    def from_event_json(self, value: Any, native: NativeJsonReader) -> dict[str, Any]:
        return {
            n: None if value.get(n) is None else ft.from_event_json(value[n], native)
            for n, ft in zip(self.field_names, self.field_types, strict=True)
        }

    def to_json(self, value: Any) -> Any:
        if isinstance(value, dict):
            types = dict(zip(self.field_names, self.field_types, strict=True))
            return {k: to_json(v, types.get(k)) for k, v in value.items()}
        return plain_json(value)

    def cql_literal(self, value: Any, literal: LiteralWriter) -> str:
        """``{field: value}``: cassandra-driver's encoder would quote the field names."""
        if not isinstance(value, dict):
            return literal(value)
        types = dict(zip(self.field_names, self.field_types, strict=True))
        return "{" + ", ".join(f"{n}: {types[n].cql_literal(v, literal)}" for n, v in value.items()) + "}"

    def element_cells(self, value: Any, native: NativeSerializer) -> list[tuple[bytes | None, bytes | None]]:
        if not self.multi_cell:
            return super().element_cells(value, native)
        fields = dict(value)
        return [
            (field_path(i), serialize_nullable(ft, fields.get(n), native))
            for i, (n, ft) in enumerate(zip(self.field_names, self.field_types, strict=True))
        ]

    def decode_path(self, path: bytes) -> str:
        return self.field_names[self._field(path)]

    def decode_cell_value(self, path: bytes, value: bytes) -> Any:
        return self._wrap_cell(decode_nested, self.field_types[self._field(path)], value)

    def assemble(self, cells: Iterable[tuple[bytes, bytes]]) -> dict[str, Any]:
        out: dict[str, Any] = dict.fromkeys(self.field_names)
        for path, value in cells:
            out[self.decode_path(path)] = self.decode_cell_value(path, value)
        return out
