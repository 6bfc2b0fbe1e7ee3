"""The JSON form of row images straight from their cell bytes: the JSON codec's path for change events.

``change_envelope`` decodes every value to its Python form (``decode_row``: a UUID object, a datetime)
and the JSON codec then converts that (to the UUID's string, to milliseconds): two steps and a Python
object per value, about a third of a worker's time per change. For the scalar types most tables are made
of, this module goes from the serialized value to its JSON form in one step. Every other type, and any
value of an unusual length (an empty value, a bad one), takes the same two steps as the envelope path,
which also raises its errors, so the output is byte for byte what that path writes (a test holds both to
it).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from cassandra_model.cql_types import NATIVE_TYPES, CqlType
from cassandra_model.partition_update import split_composite_key
from cassandra_model.table_schema import ColumnSchema, TableSchema
from state.row_image import RowImage, decode_column
from state.table_layout import ColumnLayout, layout_for

#: one value's JSON form from its serialized bytes
ValueForm = Callable[[bytes], Any]
#: the JSON codec's converter of a type's Python values (None: they are JSON already)
ConverterOf = Callable[[CqlType], Callable[[Any], Any] | None]

_INT = struct.Struct(">i").unpack
_BIGINT = struct.Struct(">q").unpack
_DOUBLE = struct.Struct(">d").unpack


def _uuid_text(raw: bytes) -> str:
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _two_steps(cql_type: CqlType, convert: Callable[[Any], Any] | None) -> ValueForm:
    """Decode, then convert: the envelope path's way, for every value the one-step forms do not take."""

    def form(raw: bytes) -> Any:
        value = cql_type.decode(raw)
        return value if value is None or convert is None else convert(value)

    return form


def _sized(size: int, one_step: ValueForm, two_steps: ValueForm) -> ValueForm:
    def form(raw: bytes) -> Any:
        return one_step(raw) if len(raw) == size else two_steps(raw)

    return form


def _int_form(convert: Callable[[Any], Any] | None, slow: ValueForm) -> ValueForm:
    if convert is not None:
        return slow
    return _sized(4, lambda raw: _INT(raw)[0], slow)


def _bigint_form(convert: Callable[[Any], Any] | None, slow: ValueForm) -> ValueForm:
    """bigint, and timestamp: its JSON form is its milliseconds, as serialized."""
    after = convert or (lambda v: v)
    return _sized(8, lambda raw: after(_BIGINT(raw)[0]), slow)


def _uuid_form(convert: Callable[[Any], Any] | None, slow: ValueForm) -> ValueForm:
    return _sized(16, _uuid_text, slow) if convert is str else slow


def _double_form(convert: Callable[[Any], Any] | None, slow: ValueForm) -> ValueForm:
    after = convert or (lambda v: v)
    return _sized(8, lambda raw: after(_DOUBLE(raw)[0]), slow)


def _boolean_form(convert: Callable[[Any], Any] | None, slow: ValueForm) -> ValueForm:
    return _sized(1, lambda raw: raw[0] != 0, slow) if convert is None else slow


def _text_form(convert: Callable[[Any], Any] | None, slow: ValueForm) -> ValueForm:
    if convert is not None:
        return slow

    def text(raw: bytes) -> Any:
        try:
            return raw.decode("utf-8")
        except (UnicodeDecodeError, AttributeError):  # a bad value, or not bytes: the decoder decides
            return slow(raw)

    return text


#: the one-step forms, by type (native types only; every other type takes the two steps)
_ONE_STEP: dict[CqlType, Callable[[Callable[[Any], Any] | None, ValueForm], ValueForm]] = {
    NATIVE_TYPES["int"]: _int_form,
    NATIVE_TYPES["bigint"]: _bigint_form,
    NATIVE_TYPES["timestamp"]: _bigint_form,
    NATIVE_TYPES["uuid"]: _uuid_form,
    NATIVE_TYPES["timeuuid"]: _uuid_form,
    NATIVE_TYPES["double"]: _double_form,
    NATIVE_TYPES["boolean"]: _boolean_form,
    NATIVE_TYPES["text"]: _text_form,
}


def value_form(cql_type: CqlType, convert: Callable[[Any], Any] | None) -> ValueForm:
    """The JSON form of one serialized value of ``cql_type``, ``convert`` being the codec's converter."""
    slow = _two_steps(cql_type, convert)
    one_step = _ONE_STEP.get(cql_type)
    return slow if one_step is None else one_step(convert, slow)


#: a non-key column: name, static, whether ``form`` takes the whole column image (counters, multi-cell
#: columns) or one cell's value bytes, and ``form``
_ColumnForm = tuple[str, bool, bool, Callable[[Any], Any]]


class JsonRowForm:
    """Row images of one table in the JSON form (every column by CQL name, None for null)."""

    def __init__(self, schema: TableSchema, converter_of: ConverterOf) -> None:
        layout = layout_for(schema)

        def simple(column: ColumnSchema) -> tuple[str, ValueForm]:
            return column.name, value_form(column.type, converter_of(column.type))

        def column_form(column: ColumnSchema, shape: ColumnLayout, static: bool) -> _ColumnForm:
            is_counter = shape.is_counter
            if is_counter or shape.is_complex:
                convert = converter_of(column.type)

                def whole(image: Any) -> Any:  # counters and multi-cell columns: decode_row's way
                    value = decode_column(column, image, is_counter)
                    return value if value is None or convert is None else convert(value)

                return column.name, static, True, whole
            return column.name, static, False, value_form(column.type, converter_of(column.type))

        self.partition_key = [simple(c) for c in schema.partition_key]
        self.clustering = [simple(c) for c in schema.clustering]
        self.columns = [column_form(c, layout.static[c.name], True) for c in schema.static_columns.values()]
        self.columns += [
            column_form(c, layout.regular[c.name], False) for c in schema.regular_columns.values()
        ]
        self.key_names = tuple(name for name, _ in (*self.partition_key, *self.clustering))

    def row(self, image: RowImage) -> dict[str, Any]:
        out: dict[str, Any] = {}
        parts = split_composite_key(image.partition_key, len(self.partition_key))
        for (name, form), raw in zip(self.partition_key, parts, strict=True):
            out[name] = form(raw)
        clustering = image.clustering
        for i, (name, form) in enumerate(self.clustering):
            raw = None if clustering is None else clustering[i]
            out[name] = None if raw is None else form(raw)
        static, regular = image.static, image.regular
        for name, is_static, whole, form in self.columns:
            cell = (static if is_static else regular).get(name)
            if cell is None:
                out[name] = None
            elif whole:
                out[name] = form(cell)
            else:
                out[name] = form(cell.value)
        return out
