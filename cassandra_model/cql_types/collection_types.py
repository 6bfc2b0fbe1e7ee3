"""Collections: ``list``, ``set`` and ``map`` (multi-cell unless frozen) and ``vector`` (always frozen)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from cassandra_model.cql_types import byte_order, canonical_forms
from cassandra_model.cql_types.cql_type import (
    CellLayout,
    CqlType,
    CqlTypeVisitor,
    NativeJsonReader,
    NativeSerializer,
    R,
    decode_nested,
    decode_nullable,
    from_driver_nullable,
    map_items,
)
from cassandra_model.cql_types.framing import (
    counted,
    counted_pairs,
    read_elements,
    read_pairs,
    read_unsigned_vint,
    unsigned_vint,
)
from cassandra_model.cql_types.json_form import map_json, plain_json, set_json
from cassandra_model.cql_types.native_decoders import decode_uuid, exact
from cassandra_model.cql_types.scalar_types import NATIVE_TYPES
from cassandra_model.errors import SchemaError

_TIMEUUID = NATIVE_TYPES["timeuuid"]


def _sort_key(element: CqlType) -> Any:
    """Serialized elements in the element type's order (an empty value first)."""
    encode = element.order_encoder()
    return lambda b: encode(b) if b else b""


class _Sequence(CqlType):
    """A collection of one element type (list, set, vector): elements, their forms and their order."""

    __slots__ = ("element",)
    element: CqlType

    @property
    def components(self) -> tuple[CqlType, ...]:
        return (self.element,)

    @property
    def byte_identical(self) -> bool:
        return self.element.byte_identical

    def from_driver(self, value: Any) -> list[Any]:
        element = self.element
        return [from_driver_nullable(element, v) for v in value]

    def from_event_json(self, value: Any, native: NativeJsonReader) -> list[Any]:
        element = self.element
        return [element.from_event_json(v, native) for v in value]

    def to_json(self, value: Any) -> Any:
        if isinstance(value, list | tuple):
            element = self.element
            return [element.to_json(v) for v in value]
        if isinstance(value, set | frozenset):
            return set_json(value, self.element)
        return plain_json(value)


class _ElementCollection(_Sequence):
    """A list or a set: same construction, freezing, spelling, frozen form."""

    __slots__ = ()
    keyword = ""

    def __init__(self, element: CqlType, *, frozen: bool) -> None:
        super().__init__(None, not frozen, empty_ok=False, hashable=False)
        self.element = element.freeze()

    @property
    def is_collection(self) -> bool:
        return True

    def freeze(self) -> _ElementCollection:
        return self if not self.multi_cell else type(self)(self.element, frozen=True)

    def cql(self) -> str:
        inner = f"{self.keyword}<{self.element.cql()}>"
        return inner if self.multi_cell else f"frozen<{inner}>"

    def _decode(self, data: bytes) -> list[Any]:
        return [decode_nullable(self.element, item) for item in read_elements(data)]

    def _order_encoder(self) -> byte_order.ValueEncoder:
        return byte_order.elements(self.element.order_encoder())

    def _canonical_form(self) -> canonical_forms.CanonicalForm:
        return canonical_forms.elements(self.element.canonical_form() or canonical_forms.same)


class ListType(_ElementCollection):
    """``list<T>``; multi-cell unless frozen. Cell path = the element's timeuuid position key."""

    __slots__ = ()
    keyword = "list"
    complex_layout = CellLayout.LIST

    def accept(self, visitor: CqlTypeVisitor[R], *args: Any) -> R:
        return visitor.visit_list(self, *args)

    def _serialize(self, value: Any, native: NativeSerializer) -> bytes:
        element = self.element
        return counted([element.serialize(v, native) for v in value])

    @property
    def path_type(self) -> CqlType:
        return _TIMEUUID

    def cell_value_type(self, path: bytes) -> CqlType:
        return self.element

    def element_cells(self, value: Any, native: NativeSerializer) -> list[tuple[bytes | None, bytes | None]]:
        element = self.element
        return [(None, element.serialize(v, native)) for v in value]

    def decode_path(self, path: bytes) -> uuid.UUID:
        return self._wrap_cell(decode_uuid, path)

    def decode_cell_value(self, path: bytes, value: bytes) -> Any:
        return self._wrap_cell(decode_nested, self.element, value)

    def assemble(self, cells: Iterable[tuple[bytes, bytes]]) -> list[Any]:
        return [self.decode_cell_value(path, value) for path, value in cells]


class SetType(_ElementCollection):
    """``set<T>``; multi-cell unless frozen. Cell path = the element itself, the cell value is empty."""

    __slots__ = ()
    keyword = "set"
    complex_layout = CellLayout.SET

    def accept(self, visitor: CqlTypeVisitor[R], *args: Any) -> R:
        return visitor.visit_set(self, *args)

    def _serialize(self, value: Any, native: NativeSerializer) -> bytes:
        element = self.element
        return counted(sorted({element.serialize(v, native) for v in value}, key=_sort_key(element)))

    @property
    def path_type(self) -> CqlType:
        return self.element

    def element_cells(self, value: Any, native: NativeSerializer) -> list[tuple[bytes | None, bytes | None]]:
        element = self.element
        paths = sorted((element.serialize(v, native) for v in value), key=_sort_key(element))
        return [(path, b"") for path in paths]

    def decode_path(self, path: bytes) -> Any:
        return self._wrap_cell(decode_nested, self.element, path)

    def decode_cell_value(self, path: bytes, value: bytes) -> None:
        return None

    def assemble(self, cells: Iterable[tuple[bytes, bytes]]) -> list[Any]:
        return [self.decode_path(path) for path, _ in cells]


class MapType(CqlType):
    """``map<K, V>``; multi-cell unless frozen. Cell path = the key, cell value = the value."""

    __slots__ = ("key", "value")
    complex_layout = CellLayout.MAP

    def __init__(self, key: CqlType, value: CqlType, *, frozen: bool) -> None:
        super().__init__(None, not frozen, empty_ok=False, hashable=False)
        self.key = key.freeze()
        self.value = value.freeze()

    @property
    def is_collection(self) -> bool:
        return True

    def freeze(self) -> MapType:
        return self if not self.multi_cell else MapType(self.key, self.value, frozen=True)

    def cql(self) -> str:
        inner = f"map<{self.key.cql()}, {self.value.cql()}>"
        return inner if self.multi_cell else f"frozen<{inner}>"

    def accept(self, visitor: CqlTypeVisitor[R], *args: Any) -> R:
        return visitor.visit_map(self, *args)

    @property
    def components(self) -> tuple[CqlType, ...]:
        return (self.key, self.value)

    def _pairs(self, pairs: Iterable[tuple[Any, Any]]) -> dict[Any, Any] | list[tuple[Any, Any]]:
        return dict(pairs) if self.key.hashable else list(pairs)

    def _decode(self, data: bytes) -> dict[Any, Any] | list[tuple[Any, Any]]:
        items = read_pairs(data)
        return self._pairs((decode_nullable(self.key, k), decode_nullable(self.value, v)) for k, v in items)

    def _serialized_pairs(self, value: Any, native: NativeSerializer) -> list[tuple[bytes, bytes]]:
        """Entries serialized, in the key type's order (a Python dict unless the keys are not hashable)."""
        items = dict(value).items() if self.key.hashable else map_items(value)
        key, val = self.key, self.value
        by_key = _sort_key(key)
        pairs = ((key.serialize(k, native), val.serialize(v, native)) for k, v in items)
        return sorted(pairs, key=lambda kv: by_key(kv[0]))

    def _serialize(self, value: Any, native: NativeSerializer) -> bytes:
        return counted_pairs(self._serialized_pairs(value, native))

    def _order_encoder(self) -> byte_order.ValueEncoder:
        return byte_order.entries(self.key.order_encoder(), self.value.order_encoder())

    def _canonical_form(self) -> canonical_forms.CanonicalForm:
        same = canonical_forms.same
        return canonical_forms.entries(self.key.canonical_form() or same, self.value.canonical_form() or same)

    @property
    def byte_identical(self) -> bool:
        return self.key.byte_identical and self.value.byte_identical

    def from_driver(self, value: Any) -> dict[Any, Any] | list[tuple[Any, Any]]:
        key, val = self.key, self.value
        pairs = [(from_driver_nullable(key, k), from_driver_nullable(val, v)) for k, v in value.items()]
        try:
            return dict(pairs)
        except TypeError:  # unhashable keys: the decoder gives pairs too
            return pairs

    def from_event_json(self, value: Any, native: NativeJsonReader) -> dict[Any, Any]:
        key, val = self.key, self.value
        pairs = value.items() if isinstance(value, dict) else value
        return {key.from_event_json(k, native): val.from_event_json(v, native) for k, v in pairs}

    def to_json(self, value: Any) -> Any:
        if isinstance(value, dict):
            return map_json(list(value.items()), self.key, self.value)
        if isinstance(value, list | tuple):
            return map_json(list(value), self.key, self.value)
        return plain_json(value)

    @property
    def path_type(self) -> CqlType:
        return self.key

    def cell_value_type(self, path: bytes) -> CqlType:
        return self.value

    def element_cells(self, value: Any, native: NativeSerializer) -> list[tuple[bytes | None, bytes | None]]:
        return list(self._serialized_pairs(value, native))

    def decode_path(self, path: bytes) -> Any:
        return self._wrap_cell(decode_nested, self.key, path)

    def decode_cell_value(self, path: bytes, value: bytes) -> Any:
        return self._wrap_cell(decode_nested, self.value, value)

    def assemble(self, cells: Iterable[tuple[bytes, bytes]]) -> dict[Any, Any] | list[tuple[Any, Any]]:
        return self._pairs((self.decode_path(p), self.decode_cell_value(p, v)) for p, v in cells)


class VectorType(_Sequence):
    """``vector<T, n>`` (5.0): fixed length when T is; variable elements carry a vint length each."""

    __slots__ = ("dimension",)

    def __init__(self, element: CqlType, dimension: int) -> None:
        element = element.freeze()
        if dimension <= 0:
            raise SchemaError(f"vector dimension must be positive, got {dimension}")
        fixed = element.fixed_length * dimension if element.fixed_length is not None else None
        super().__init__(fixed, False, empty_ok=False, hashable=False)
        self.element = element
        self.dimension = dimension

    def cql(self) -> str:
        return f"vector<{self.element.cql()}, {self.dimension}>"

    def accept(self, visitor: CqlTypeVisitor[R], *args: Any) -> R:
        return visitor.visit_vector(self, *args)

    def _decode(self, data: bytes) -> list[Any]:
        size = self.element.fixed_length
        if size is not None:
            exact(data, size * self.dimension, self.cql())
            return [decode_nested(self.element, data[i : i + size]) for i in range(0, len(data), size)]
        out = []
        pos = 0
        for _ in range(self.dimension):
            length, pos = read_unsigned_vint(data, pos)
            end = pos + length
            if end > len(data):
                raise ValueError("vector element runs past the end of the value")
            out.append(decode_nested(self.element, data[pos:end]))
            pos = end
        if pos != len(data):
            raise ValueError(f"{len(data) - pos} trailing bytes after the vector")
        return out

    def _serialize(self, value: Any, native: NativeSerializer) -> bytes:
        element = self.element
        items = [element.serialize(v, native) for v in value]
        if element.fixed_length is not None:
            return b"".join(items)
        return b"".join(unsigned_vint(len(i)) + i for i in items)

    def _order_encoder(self) -> byte_order.ValueEncoder:
        return byte_order.vector(self.element.order_encoder(), self.element.fixed_length, self.dimension)

    def _canonical_form(self) -> canonical_forms.CanonicalForm:
        element = self.element.canonical_form() or canonical_forms.same
        return canonical_forms.vector(element, self.element.fixed_length, self.dimension)
