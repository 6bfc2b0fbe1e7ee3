"""Change events as UTF-8 JSON: the JSON column of the mapping in ``schemas.change_codec``.

JSON keys are written compact with sorted object keys, so equal primary keys always give equal bytes (log
compaction compares key bytes). JSON numbers beyond 2**53 lose precision in many JSON parsers, which is
why varint is a string; bigint and counter stay numbers, as in Debezium. ``json_value_row`` gives a row
dict in the same form, for everything that shows rows as the clean topics do (the REST API, the lake).
"""

from __future__ import annotations

import binascii
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from cassandra_model.cql_types import (
    NATIVE_TYPES,
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
from runtime.config import DecimalHandling
from schemas.change_codec import ChangeDecodingError, ChangeEncodingError, encode_change_via_envelope
from schemas.change_conversions import (
    Converter,
    RowSpec,
    always_null,
    as_list,
    convert_row,
    decimal_double,
    duration_fields,
    epoch_days,
    epoch_millis,
    key_columns,
    key_decimal_handling,
    map_items,
    nanos_of_day,
    plain_decimal,
)
from schemas.change_event import OPS, VERSION, ChangeSource, envelope_op
from schemas.json_row_form import ConverterOf, JsonRowForm
from state.change import RowChange
from state.table_layout import layout_for


def _json_float(v: float) -> float | str:
    if v - v == 0:  # finite
        return v
    return "NaN" if v != v else ("Infinity" if v > 0 else "-Infinity")


def _base64(v: Any) -> str:
    return binascii.b2a_base64(v, newline=False).decode("ascii")


_JSON_SCALARS: dict[str, Converter | None] = dict(
    every_native(
        {
            "ascii": None,
            "text": None,
            "boolean": None,
            "tinyint": None,
            "smallint": None,
            "int": None,
            "bigint": None,
            "counter": None,
            "varint": str,
            "float": _json_float,
            "double": _json_float,
            "decimal": str,
            "date": epoch_days,
            "time": nanos_of_day,
            "timestamp": epoch_millis,
            "uuid": str,
            "timeuuid": str,
            "inet": str,
            "duration": duration_fields,
            "blob": _base64,
            "empty": always_null,
        },
        "the JSON form of change events",
    )
)


#: a decimal's JSON form under each ``decimal_handling``
_DECIMAL_FORMS: dict[str, Converter] = {"precise": str, "string": plain_decimal, "double": decimal_double}


class JsonConverters(CqlTypeVisitor[Converter | None]):
    """The JSON form of one non-null value, per kind of type (None: the value is already JSON).

    ``convert(t)`` is the converter of type ``t``; nested types go through it again, so a subclass that
    changes one kind of type (Kafka Connect's tuples, ``schemas.change_connect_json``) changes it at every
    depth. ``decimal_handling`` is the worker's (``precise``: ``str``, which keeps the scale).
    """

    __slots__ = ("_decimal",)

    def __init__(self, decimal_handling: DecimalHandling = "precise") -> None:
        self._decimal: Converter = _DECIMAL_FORMS[decimal_handling]

    def convert(self, t: CqlType) -> Converter | None:
        return t.accept(self)

    def visit_native(self, t: NativeType, *args: Any) -> Converter | None:
        if t.name == "decimal":
            return self._decimal
        return _JSON_SCALARS[t.name]

    def visit_custom(self, t: CustomType, *args: Any) -> Converter | None:
        return _base64

    def visit_list(self, t: ListType | SetType | VectorType, *args: Any) -> Converter | None:
        elem = self.convert(t.element)
        if elem is None:
            return as_list
        return lambda v: [None if x is None else elem(x) for x in v]

    visit_set = visit_list
    visit_vector = visit_list

    def visit_map(self, t: MapType, *args: Any) -> Converter | None:
        kc = self.convert(t.key)
        vc = self.convert(t.value)
        if t.key.is_text:
            if vc is None:
                return lambda v: dict(map_items(v))
            return lambda v: {k: None if x is None else vc(x) for k, x in map_items(v)}
        return lambda v: [
            [k if k is None or kc is None else kc(k), x if x is None or vc is None else vc(x)]
            for k, x in map_items(v)
        ]

    def visit_tuple(self, t: TupleType, *args: Any) -> Converter | None:
        convs = [self.convert(e) for e in t.elements]
        return lambda v: [x if x is None or c is None else c(x) for c, x in zip(convs, v, strict=True)]

    def visit_user_type(self, t: UserType, *args: Any) -> Converter | None:
        fields = [(n, self.convert(ft)) for n, ft in zip(t.field_names, t.field_types, strict=True)]

        def udt(v: dict[str, Any]) -> dict[str, Any]:
            get = v.get
            return {n: x if (x := get(n)) is None or c is None else c(x) for n, c in fields}

        return udt


#: the JSON form of one non-null value of a type (None: the value is already JSON)
json_converter: ConverterOf = JsonConverters().convert


def _json_spec(columns: Iterable[ColumnSchema], converter_of: ConverterOf) -> RowSpec:
    columns = list(columns)
    work = []
    for column in columns:
        conv = converter_of(column.type)
        if conv is not None:
            work.append((column.name, conv, None, False))
    return RowSpec(frozenset(c.name for c in columns), work, None)


#: the native encoder's kind of each type it writes itself (native/src/change_json.rs): the one-step
#: forms of ``json_row_form`` and the precise decimal
_NATIVE_KINDS: dict[CqlType, int] = {
    NATIVE_TYPES["text"]: 0,
    NATIVE_TYPES["int"]: 1,
    NATIVE_TYPES["bigint"]: 2,
    NATIVE_TYPES["timestamp"]: 2,
    NATIVE_TYPES["uuid"]: 3,
    NATIVE_TYPES["timeuuid"]: 3,
    NATIVE_TYPES["double"]: 4,
    NATIVE_TYPES["boolean"]: 5,
    NATIVE_TYPES["decimal"]: 6,
}

#: the native core's encoder class (``cdc_native.ChangeJson``): built from ``source.version`` and a
#: table's columns with their kinds, its ``encode(before, after, op, source, ts_ms)`` returns the key
#: and value ``encode_change`` writes, or None where Python must write them
NativeEncoder = Callable[..., Any]


def _native_table(native: NativeEncoder, schema: TableSchema) -> Any:
    """The native encoder of a table whose every column is of a type it writes (else None)."""
    layout = layout_for(schema)
    columns = []
    for is_static, group, shapes in (
        (True, schema.static_columns, layout.static),
        (False, schema.regular_columns, layout.regular),
    ):
        for column in group.values():
            shape = shapes[column.name]
            kind = _NATIVE_KINDS.get(column.type)
            if shape.is_counter or shape.is_complex or kind is None:
                return None
            columns.append((column.name, is_static, kind))
    keys = []
    for part in (schema.partition_key, schema.clustering):
        kinds = [(column.name, _NATIVE_KINDS.get(column.type)) for column in part]
        if any(kind is None for _, kind in kinds):
            return None
        keys.append(kinds)
    return native(VERSION, keys[0], keys[1], columns)


@dataclass(slots=True)
class _JsonTable:
    key: RowSpec
    row: RowSpec
    form: JsonRowForm
    #: the form key columns are read in (``form`` unless keys are written otherwise)
    key_form: JsonRowForm
    #: the native core's encoder of the table's changes (None: Python writes them all)
    native: Any = None


KEY_JSON = json.JSONEncoder(ensure_ascii=False, allow_nan=False, sort_keys=True, separators=(",", ":"))
VALUE_JSON = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


class JsonChangeCodec:
    """Change events as UTF-8 JSON (mapping in the module notes); keys compact with sorted object keys.

    ``converter_of`` gives the JSON form of each type's values, ``key_converter_of`` that of key columns
    (by default the same); another JSON dialect (Kafka Connect's, in ``schemas.change_connect_json``)
    passes its own. ``for_decimals`` makes the converters of a ``decimal_handling``.
    """

    def __init__(
        self,
        converter_of: ConverterOf = json_converter,
        key_converter_of: ConverterOf | None = None,
        *,
        native: NativeEncoder | None = None,
    ) -> None:
        """``native``: the native core's encoder (``cdc_native.ChangeJson``, see app/worker_core.py); it
        writes the default JSON forms only, so other converters leave every change to Python."""
        self._tables: dict[int, tuple[TableSchema, _JsonTable]] = {}
        self._converter_of = converter_of
        self._key_converter_of = key_converter_of or converter_of
        default = converter_of is json_converter and self._key_converter_of is json_converter
        self._native = native if default else None

    @classmethod
    def for_decimals(
        cls, decimal_handling: DecimalHandling, *, native: NativeEncoder | None = None
    ) -> JsonChangeCodec:
        """The JSON codec writing decimals as ``decimal_handling`` says (keys exact, see
        ``key_decimal_handling``); ``native`` as for the constructor."""
        if decimal_handling == "precise":
            return cls(native=native)
        keys = key_decimal_handling(decimal_handling)
        values = JsonConverters(decimal_handling).convert
        return cls(values, values if keys == decimal_handling else JsonConverters(keys).convert)

    def _table(self, schema: TableSchema) -> _JsonTable:
        found = self._tables.get(id(schema))
        if found is not None and found[0] is schema:
            return found[1]
        try:
            form = JsonRowForm(schema, self._converter_of)
            same_keys = self._key_converter_of is self._converter_of
            table = _JsonTable(
                _json_spec(key_columns(schema), self._key_converter_of),
                _json_spec(schema.all_columns(), self._converter_of),
                form,
                form if same_keys else JsonRowForm(schema, self._key_converter_of),
                None if self._native is None else _native_table(self._native, schema),
            )
        except TypeError as exc:
            raise ChangeEncodingError(str(exc), table=schema.name) from exc
        if len(self._tables) > 4096:
            self._tables.clear()
        self._tables[id(schema)] = (schema, table)
        return table

    async def prepare(self, schema: TableSchema) -> None:
        self._table(schema)

    def native_encoder(self, schema: TableSchema) -> Any:
        """The native core's encoder of the table's changes (a ``cdc_native.ChangeJson``), or None where
        Python writes them (no native core, another JSON dialect, a column of another type)."""
        return self._table(schema).native

    def encode_key(self, schema: TableSchema, key: dict[str, Any]) -> bytes:
        row = convert_row(self._table(schema).key, key, schema.name)
        return KEY_JSON.encode(row).encode()

    def encode_change(
        self, schema: TableSchema, change: RowChange, source: ChangeSource, ts_ms: int
    ) -> tuple[bytes, bytes]:
        """Images straight to their JSON form (``json_row_form``); anything unusual (an error included)
        takes the envelope path, which writes the same bytes or raises the error it names."""
        table = self._table(schema)
        op = envelope_op(change, schema, source)
        if table.native is not None:
            encoded = table.native.encode(change.before, change.after, op, source, ts_ms)
            if encoded is not None:
                return encoded  # type: ignore[no-any-return]
        form = table.form
        try:
            before = None if change.before is None else form.row(change.before)
            after = None if change.after is None else form.row(change.after)
            row = after if after is not None else before
            assert row is not None  # envelope_op checked the images
            if table.key_form is not form:
                image = change.after if change.after is not None else change.before
                assert image is not None
                row = table.key_form.row(image)
            key = KEY_JSON.encode({name: row[name] for name in form.key_names}).encode()
            value = VALUE_JSON.encode(
                {"before": before, "after": after, "op": op, "source": source.as_dict(ts_ms), "ts_ms": ts_ms}
            ).encode()
        except Exception:
            return encode_change_via_envelope(self, schema, change, source, ts_ms)
        return key, value

    def encode_value(self, schema: TableSchema, envelope: dict[str, Any]) -> bytes:
        table = self._table(schema)
        before = envelope["before"]
        after = envelope["after"]
        if envelope["op"] not in OPS:
            raise ChangeEncodingError(f"unknown op {envelope['op']!r}", table=schema.name)
        value = {
            "before": None if before is None else convert_row(table.row, before, schema.name),
            "after": None if after is None else convert_row(table.row, after, schema.name),
            "op": envelope["op"],
            "source": envelope["source"],
            "ts_ms": envelope["ts_ms"],
        }
        try:
            return VALUE_JSON.encode(value).encode()
        except (TypeError, ValueError) as exc:
            raise ChangeEncodingError(f"envelope is not JSON-serializable: {exc}", table=schema.name) from exc

    def decode_key(self, data: bytes) -> dict[str, Any]:
        return self.decode_json_object(data, "key")

    def decode_value(self, data: bytes) -> dict[str, Any]:
        return self.decode_json_object(data, "value")

    @staticmethod
    def decode_json_object(data: bytes, what: str) -> dict[str, Any]:
        """``data`` as a JSON object, or ChangeDecodingError naming ``what`` (key, value) it was to be."""
        try:
            value = json.loads(data)
        except ValueError as exc:
            raise ChangeDecodingError(f"change-event {what} is not JSON: {data[:80]!r} ({exc})") from exc
        if not isinstance(value, dict):
            raise ChangeDecodingError(f"change-event {what} is not a JSON object: {data[:80]!r}")
        return value


_ROWS_AS_JSON = JsonChangeCodec()


def json_value_row(schema: TableSchema, row: dict[str, Any]) -> dict[str, Any]:
    """A row dict of ``decode_row`` in the JSON mapping (JSON-serializable), e.g. for the REST API."""
    return convert_row(_ROWS_AS_JSON._table(schema).row, row, schema.name)
