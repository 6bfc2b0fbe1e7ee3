"""The base of every CQL type: what a type knows about itself, and the one switch over the kinds of type.

A type carries each codec, conversion and order of its values as a method, so adding a CQL type is
adding its class; callers call the method instead of testing which class a type is. Where a native
value needs cassandra-driver (its serializers, its Date and Duration), the method takes that leaf as an
argument (``NativeSerializer``...): the merge state imports this package and must not import the driver,
so the driver-backed leaves live above it (``cassandra_model.value_serializer``, the REST API). Concerns
of an upper layer (Spark types, Avro schemas) implement ``CqlTypeVisitor``, whose methods are abstract,
so a visitor that misses a kind of type fails when it is instantiated, not when a table with that type
first shows up.
"""

from __future__ import annotations

import enum
import struct
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar

from cassandra_model.cql_types import byte_order, canonical_forms
from cassandra_model.cql_types.json_form import plain_json
from cassandra_model.cql_types.values import SerializedValue
from cassandra_model.errors import ValueDecodeError

if TYPE_CHECKING:
    from cassandra_model.cql_types.collection_types import ListType, MapType, SetType, VectorType
    from cassandra_model.cql_types.record_types import TupleType, UserType
    from cassandra_model.cql_types.scalar_types import CustomType, NativeType

R = TypeVar("R")

_DECODE_ERRORS = (struct.error, ValueError, IndexError, UnicodeDecodeError, OverflowError, TypeError)

#: the bytes of a (non-null) value of a native type
NativeSerializer = Callable[["NativeType", Any], bytes]
#: a (non-null) JSON value of a native type as a value the NativeSerializer takes
NativeJsonReader = Callable[["NativeType", Any], Any]
#: the CQL literal of a value (collections and scalars as they are)
LiteralWriter = Callable[[Any], str]


class CellLayout(enum.Enum):
    """How a column of a type is written to the commit log: one cell, or one cell per element (a
    multi-cell column: non-frozen collections and UDTs), identified by the cell path."""

    #: one cell holds the whole value (every frozen or native type)
    SINGLE = "single"
    #: path: a timeuuid giving the element's position; value: the element
    LIST = "list"
    #: path: the element; value: empty
    SET = "set"
    #: path: the key; value: the value
    MAP = "map"
    #: path: the field's 2-byte index; value: the field (UDTs, and tuples of dropped UDT columns)
    FIELDS = "fields"


class UdtResolver(Protocol):
    """Finds a user-defined type by keyspace and name (see table_schema.UdtRegistry)."""

    def resolve_udt(self, keyspace: str | None, name: str) -> UserType: ...


class CqlTypeVisitor(ABC, Generic[R]):
    """One concern of an upper layer, for every kind of CQL type: ``t.accept(visitor, *args)`` calls
    the method for t's kind with t and args. Every method is abstract on purpose (see module docstring)."""

    __slots__ = ()

    @abstractmethod
    def visit_native(self, t: NativeType, *args: Any) -> R: ...

    @abstractmethod
    def visit_custom(self, t: CustomType, *args: Any) -> R: ...

    @abstractmethod
    def visit_list(self, t: ListType, *args: Any) -> R: ...

    @abstractmethod
    def visit_set(self, t: SetType, *args: Any) -> R: ...

    @abstractmethod
    def visit_map(self, t: MapType, *args: Any) -> R: ...

    @abstractmethod
    def visit_tuple(self, t: TupleType, *args: Any) -> R: ...

    @abstractmethod
    def visit_user_type(self, t: UserType, *args: Any) -> R: ...

    @abstractmethod
    def visit_vector(self, t: VectorType, *args: Any) -> R: ...


class CqlType:
    """Base of every CQL type.

    ``fixed_length`` is the commit-log value length when values are written without a length prefix
    (None when variable); ``multi_cell`` is True for non-frozen collections and UDTs (complex columns).
    Values: ``decode`` reads serialized bytes, ``serialize`` writes them; ``from_driver`` takes a value as
    cassandra-driver returns it, ``from_event_json`` one in the clean topics' JSON form; ``to_json``
    renders a decoded value for dumps, ``cql_literal`` for statements; ``order_encoder`` orders
    serialized values as Cassandra does, ``canonical`` gives values that compare equal one form.
    """

    __slots__ = ("_order", "empty_ok", "fixed_length", "hashable", "multi_cell")

    #: the layout of a multi-cell column of this kind of type
    complex_layout: ClassVar[CellLayout] = CellLayout.SINGLE

    def __init__(self, fixed_length: int | None, multi_cell: bool, *, empty_ok: bool, hashable: bool) -> None:
        self.fixed_length = fixed_length
        self.multi_cell = multi_cell
        self.empty_ok = empty_ok
        self.hashable = hashable
        self._order: byte_order.ValueEncoder | None = None

    # -- description

    def cql(self) -> str:
        """The type as system_schema.columns.type spells it."""
        raise NotImplementedError

    def freeze(self) -> CqlType:
        """The frozen (single-cell) form of this type."""
        return self

    def accept(self, visitor: CqlTypeVisitor[R], *args: Any) -> R:
        """``visitor``'s method for this kind of type, called with this type and ``args``."""
        raise NotImplementedError

    @property
    def components(self) -> tuple[CqlType, ...]:
        """The types this one is made of (elements, key and value, fields), outermost level only."""
        return ()

    def user_types(self) -> Iterator[UserType]:
        """Every user type this type refers to, innermost first (CREATE TYPE order), repeats included."""
        for component in self.components:
            yield from component.user_types()

    @property
    def is_collection(self) -> bool:
        return False

    @property
    def is_counter(self) -> bool:
        return False

    @property
    def is_text(self) -> bool:
        """Whether values are Python strings (text, ascii): the JSON forms use them as object keys."""
        return False

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CqlType) and type(other) is type(self) and other.cql() == self.cql()

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.cql()))

    def __repr__(self) -> str:
        return f"<CqlType {self.cql()}>"

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without the cached order encoder, a closure (Spark ships schemas to its executors)."""
        return {
            name: getattr(self, name)
            for cls in type(self).__mro__
            for name in getattr(cls, "__slots__", ())
            if name != "_order" and hasattr(self, name)
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name, value in state.items():
            setattr(self, name, value)
        self._order = None

    # -- serialized values

    def decode(self, data: bytes | bytearray | memoryview) -> Any:
        """Decode one serialized value; ValueDecodeError if the bytes do not fit the type."""
        if not isinstance(data, bytes):
            data = bytes(data)
        if not data and not self.empty_ok:
            return None
        try:
            return self._decode(data)
        except ValueDecodeError:
            raise
        except _DECODE_ERRORS as exc:
            raise ValueDecodeError(f"cannot decode {len(data)} bytes as {self.cql()}: {exc}") from exc

    def _decode(self, data: bytes) -> Any:
        raise NotImplementedError

    def serialize(self, value: Any, native: NativeSerializer) -> bytes:
        """The native-protocol v4 bytes of a value (frozen form for collections and UDTs; set elements and
        map keys sorted in the element type's order, as Cassandra stores them), ``native`` writing the
        native values. A SerializedValue, at any depth, is written as it is."""
        if isinstance(value, SerializedValue):
            return value.data
        return self._serialize(value, native)

    def _serialize(self, value: Any, native: NativeSerializer) -> bytes:
        raise TypeError(f"cannot serialize a value of type {self.cql()}")

    def order_encoder(self) -> byte_order.ValueEncoder:
        """The order-preserving, prefix-free encoding of a NON-EMPTY serialized value (ascending), built
        once per type object; bytes that do not fit the type raise ClusteringValueError."""
        encode = self._order
        if encode is None:
            encode = self._order = byte_order.guarded(self._order_encoder(), self.cql())
        return encode

    def _order_encoder(self) -> byte_order.ValueEncoder:
        raise NotImplementedError

    @property
    def byte_identical(self) -> bool:
        """True when two values compare equal only if their bytes are equal."""
        raise NotImplementedError

    def canonical_form(self) -> canonical_forms.CanonicalForm | None:
        """The function that gives a NON-EMPTY serialized value the one form of every value that compares
        equal to it (see ``canonical_forms``), or None when equal values have equal bytes; bytes that do
        not fit the type raise ClusteringValueError. Built on each call: callers keep it."""
        if self.byte_identical:
            return None
        return byte_order.guarded(self._canonical_form(), self.cql())

    def _canonical_form(self) -> canonical_forms.CanonicalForm:
        raise NotImplementedError

    def canonical(self, data: bytes) -> bytes:
        """A serialized value in its canonical form (an empty value stays empty)."""
        form = self.canonical_form()
        return data if form is None or not data else form(data)

    # -- Python values in other forms

    def from_driver(self, value: Any) -> Any:
        """A non-null value as cassandra-driver returns it, as ``decode`` gives it."""
        return value

    def from_event_json(self, value: Any, native: NativeJsonReader) -> Any:
        """A non-null value in the clean topics' JSON form, as a value ``serialize`` takes (``native``
        reading the native values)."""
        raise TypeError(f"type {self.cql()} cannot be given in JSON")

    def to_json(self, value: Any) -> Any:
        """A JSON-friendly rendering of a decoded value (see ``json_form.to_json``)."""
        return plain_json(value)

    def cql_literal(self, value: Any, literal: LiteralWriter) -> str:
        """A CQL literal of a value, ``literal`` writing what the type does not structure itself."""
        return literal(value)

    # -- multi-cell (complex) columns: one cell per element, identified by its path

    @property
    def cell_layout(self) -> CellLayout:
        """How a column of this type is written: one cell, or one per element (``complex_layout``)."""
        return self.complex_layout if self.multi_cell else CellLayout.SINGLE

    @property
    def path_type(self) -> CqlType | None:
        """The type cell paths are values of, in a multi-cell column (list: timeuuid, set: the element,
        map: the key; None: a field index, ordered by its bytes)."""
        return None

    def cell_value_type(self, path: bytes) -> CqlType | None:
        """The type of the value of the cell at ``path`` (None: sets, whose cell values are empty)."""
        return None

    def element_cells(self, value: Any, native: NativeSerializer) -> list[tuple[bytes | None, bytes | None]]:
        """The (path, value) cells that write ``value`` to a multi-cell column, in Cassandra's cell order
        (set elements and map keys sorted by their type's order): list elements have path None (their
        timeuuid paths come from the write, not the value); a null UDT field has value None (no cell)."""
        raise TypeError(f"{self.cql()} is not a collection or UDT")

    def decode_path(self, path: bytes) -> Any:
        """The element key a cell path stands for (list: timeuuid, set: element, map: key, UDT: field)."""
        raise ValueDecodeError(f"{self.cql()} is not multi-cell; its cells have no path")

    def decode_cell_value(self, path: bytes, value: bytes) -> Any:
        """The element value a complex cell holds (None for sets, whose element is the path)."""
        raise ValueDecodeError(f"{self.cql()} is not multi-cell; its cells have no path")

    def assemble(self, cells: Iterable[tuple[bytes, bytes]]) -> Any:
        """The whole value of a multi-cell column from its (path, value) cells in path order."""
        raise ValueDecodeError(f"{self.cql()} is not multi-cell")

    def _wrap_cell(self, fn: Any, *args: bytes) -> Any:
        try:
            return fn(*args)
        except ValueDecodeError:
            raise
        except _DECODE_ERRORS as exc:
            raise ValueDecodeError(f"cannot decode a cell of {self.cql()}: {exc}") from exc


def decode_nested(t: CqlType, data: bytes) -> Any:
    """Decode a nested value without the public error wrapping (the outermost decode wraps)."""
    if not data and not t.empty_ok:
        return None
    return t._decode(data)


def decode_nullable(t: CqlType, item: bytes | None) -> Any:
    """A nested element that may be null."""
    return None if item is None else decode_nested(t, item)


def serialize_nullable(t: CqlType, value: Any, native: NativeSerializer) -> bytes | None:
    """A nested element that may be null."""
    return None if value is None else t.serialize(value, native)


def from_driver_nullable(t: CqlType, value: Any) -> Any:
    """A nested cassandra-driver value that may be null."""
    return None if value is None else t.from_driver(value)


def map_items(value: Any) -> Iterable[tuple[Any, Any]]:
    """Map entries: a dict (or the driver's ordered map), or (key, value) pairs when keys are not hashable."""
    return value.items() if hasattr(value, "items") else value
