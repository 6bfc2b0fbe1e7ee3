"""The Avro schemas of a table's change events, generated from its TableSchema with their writers.

One Key record (partition key fields required, clustering fields nullable for the static-only row), one
Envelope ``{before, after: ["null", Value], op, source: cdc.change.Source, ts_ms}``; every non-key
column is nullable with default null. Records are named ``<namespace>.<keyspace>.<table>.Key/Value/
Envelope``; a nested record is named after its path from the column (``...<table>.<column>.Tuple``,
``...<column>.element.<udt>``, ``...<column>.Entry``), so adding a column never renames another's types.
Collection elements, map keys and values are not nullable (CQL has no null elements); a null there
(only an empty value of a non-string element type decodes to one) is an encoding error. Every column
field carries ``cql_name`` and ``cql_type`` attributes for consumers. Names follow
``schemas.change_avro_names``.
"""

from __future__ import annotations

import decimal
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
    every_native,
)
from cassandra_model.table_schema import ColumnKind, ColumnSchema
from runtime.config import DecimalHandling
from schemas.change_avro_names import avro_name
from schemas.change_avro_writer import RowWriter, Writer, column_writer
from schemas.change_conversions import (
    Converter,
    RowSpec,
    always_null,
    as_list,
    decimal_double,
    duration_fields,
    epoch_days,
    epoch_millis,
    map_items,
    nanos_of_day,
    plain_decimal,
)

#: namespace of the records every table shares (Source, Decimal, Duration)
SHARED_NAMESPACE = "cdc.change"


def decimal_record(v: Any) -> dict[str, Any]:
    if not isinstance(v, decimal.Decimal):
        v = decimal.Decimal(v)
    sign, digits, exponent = v.as_tuple()
    if not isinstance(exponent, int):
        raise ValueError(f"{v} is not a finite decimal")
    unscaled = int("".join(map(str, digits)) or "0")
    if sign:
        unscaled = -unscaled
    size = (unscaled + (unscaled < 0)).bit_length() // 8 + 1  # Java's BigInteger.toByteArray length
    return {"unscaled": unscaled.to_bytes(size, "big", signed=True), "scale": -exponent}


def _shared_records() -> tuple[dict[str, Any], dict[str, Any]]:
    # a CQL decimal's scale varies per value, so Avro's decimal logical type (one scale per schema) cannot
    # hold it. Not Debezium's VariableScaleDecimal either: its JDBC sink stores that as double precision,
    # losing digits ("-0.001" read back as -0.00100000000000000002...)
    dec = {
        "type": "record",
        "name": f"{SHARED_NAMESPACE}.Decimal",
        "doc": "CQL decimal: unscaled * 10^-scale; unscaled is big-endian two's complement",
        "fields": [{"name": "unscaled", "type": "bytes"}, {"name": "scale", "type": "int"}],
    }
    duration = {
        "type": "record",
        "name": f"{SHARED_NAMESPACE}.Duration",
        "doc": "CQL duration: independent signed months, days and nanoseconds",
        "fields": [
            {"name": "months", "type": "int"},
            {"name": "days", "type": "int"},
            {"name": "nanos", "type": "long"},
        ],
    }
    return dec, duration


_DECIMAL_RECORD, _DURATION_RECORD = _shared_records()

#: native type -> (Avro type, converter); a named record (decimal, duration) is defined at its first use
_AVRO_SCALARS: dict[str, tuple[Any, Converter | None]] = {
    "decimal": (_DECIMAL_RECORD, decimal_record),
    "duration": (_DURATION_RECORD, duration_fields),
    "ascii": ("string", None),
    "text": ("string", None),
    "boolean": ("boolean", None),
    "tinyint": ("int", None),
    "smallint": ("int", None),
    "int": ("int", None),
    "bigint": ("long", None),
    "counter": ("long", None),
    "varint": ("string", str),
    "float": ("float", None),
    "double": ("double", None),
    "date": ({"type": "int", "logicalType": "date"}, epoch_days),
    "time": ("long", nanos_of_day),
    "timestamp": ({"type": "long", "logicalType": "timestamp-millis"}, epoch_millis),
    "uuid": ({"type": "string", "logicalType": "uuid"}, str),
    "timeuuid": ({"type": "string", "logicalType": "uuid"}, str),
    "inet": ("string", str),
    "blob": ("bytes", None),
    "empty": ("null", always_null),
}
every_native(_AVRO_SCALARS, "the Avro form of change events")


@dataclass(slots=True)
class _AvroType:
    schema: Any
    conv: Converter | None
    #: the union branch name for fastavro's tuple notation (skips its trial validation of every branch)
    branch: str | None = None


def _no_nulls(v: list[Any]) -> list[Any]:
    if None in v:
        raise ValueError("a collection element is null (an empty value?); Avro collections hold no nulls")
    return v


def _wrap(conv: Converter | None, branch: str | None) -> Converter | None:
    """The converter of a value in a nullable position (a union: tuple notation names the branch)."""
    if branch is None:
        return conv
    if conv is None:
        return lambda v: (branch, v)
    return lambda v: (branch, conv(v))


class AvroSchemaBuilder(CqlTypeVisitor[_AvroType]):
    """Generates one Avro schema document (key or value) for a table; a named type is defined at its
    first use and referenced by name afterwards. The Avro type of each kind of CQL type is its visitor
    method, called with the type's path from the column (``type_of``)."""

    __slots__ = ("decimal_handling", "defined")

    def __init__(self, decimal_handling: DecimalHandling = "precise") -> None:
        self.defined: set[str] = set()
        #: ``precise``: the record cdc.change.Decimal; ``string``: plain digits; ``double``: a double
        self.decimal_handling = decimal_handling

    def named(self, record: dict[str, Any]) -> Any:
        name = record["name"]
        if name in self.defined:
            return name
        self.defined.add(name)
        return record

    def nullable(self, t: CqlType, path: tuple[str, ...]) -> _AvroType:
        inner = self.type_of(t, path)
        if inner.schema == "null":
            return inner
        return _AvroType(["null", inner.schema], inner.conv, inner.branch)

    def type_of(self, t: CqlType, path: tuple[str, ...]) -> _AvroType:
        return t.accept(self, path)

    def visit_native(self, t: NativeType, path: tuple[str, ...]) -> _AvroType:
        if t.name == "decimal" and self.decimal_handling != "precise":
            if self.decimal_handling == "double":
                return _AvroType("double", decimal_double)
            return _AvroType("string", plain_decimal)
        schema, conv = _AVRO_SCALARS[t.name]
        if isinstance(schema, dict) and schema.get("type") == "record":
            return _AvroType(self.named(schema), conv, schema["name"])
        return _AvroType(schema, conv)

    def visit_custom(self, t: CustomType, path: tuple[str, ...]) -> _AvroType:
        return _AvroType("bytes", None)

    def visit_list(self, t: ListType | SetType | VectorType, path: tuple[str, ...]) -> _AvroType:
        elem = self.type_of(t.element, (*path, "element"))
        conv = elem.conv
        if conv is None:
            return _AvroType(
                {"type": "array", "items": elem.schema}, lambda v: _no_nulls(as_list(v)), "array"
            )
        return _AvroType(
            {"type": "array", "items": elem.schema},
            lambda v: [conv(x) for x in _no_nulls(as_list(v))],
            "array",
        )

    visit_set = visit_list
    visit_vector = visit_list

    def visit_tuple(self, t: TupleType, path: tuple[str, ...]) -> _AvroType:
        name = ".".join((*path, "Tuple"))
        fields = []
        wraps = []
        for i, element in enumerate(t.elements):
            field = self.nullable(element, (*path, f"f{i}"))
            fields.append({"name": f"f{i}", "type": field.schema, "default": None})
            wraps.append((f"f{i}", _wrap(field.conv, field.branch)))
        record = {"type": "record", "name": name, "fields": fields}

        def tuple_record(v: Any) -> dict[str, Any]:
            return {n: x if x is None or c is None else c(x) for (n, c), x in zip(wraps, v, strict=True)}

        return _AvroType(record, tuple_record, name)

    def visit_user_type(self, t: UserType, path: tuple[str, ...]) -> _AvroType:
        name = ".".join((*path, avro_name(t.name)))
        fields = []
        specs = []
        for field_name, field_type in zip(t.field_names, t.field_types, strict=True):
            avro_field = avro_name(field_name)
            field = self.nullable(field_type, (*path, avro_field))
            fields.append({"name": avro_field, "type": field.schema, "default": None, "cql_name": field_name})
            specs.append((field_name, avro_field, _wrap(field.conv, field.branch)))
        record = {"type": "record", "name": name, "cql_type": t.freeze().cql(), "fields": fields}

        def udt_record(v: dict[str, Any]) -> dict[str, Any]:
            get = v.get
            return {a: x if (x := get(n)) is None or c is None else c(x) for n, a, c in specs}

        return _AvroType(record, udt_record, name)

    def visit_map(self, t: MapType, path: tuple[str, ...]) -> _AvroType:
        value = self.type_of(t.value, (*path, "value"))
        vc = value.conv
        if t.key.is_text:
            schema = {"type": "map", "values": value.schema}

            def text_map(v: Any) -> dict[str, Any]:
                out = dict(map_items(v))
                if None in out.values():
                    raise ValueError("a map value is null (an empty value?); Avro maps hold no nulls")
                return out if vc is None else {k: vc(x) for k, x in out.items()}

            return _AvroType(schema, text_map, "map")
        key = self.type_of(t.key, (*path, "key"))
        kc = key.conv
        entry = {
            "type": "record",
            "name": ".".join((*path, "Entry")),
            "fields": [{"name": "key", "type": key.schema}, {"name": "value", "type": value.schema}],
        }

        def entries(v: Any) -> list[dict[str, Any]]:
            out = []
            for k, x in map_items(v):
                if k is None or x is None:
                    raise ValueError("a map key or value is null (an empty value?); Avro maps hold no nulls")
                out.append({"key": k if kc is None else kc(k), "value": x if vc is None else vc(x)})
            return out

        return _AvroType({"type": "array", "items": entry}, entries, "array")

    def record(
        self, name: str, columns: list[ColumnSchema], base: tuple[str, ...]
    ) -> tuple[dict[str, Any], RowSpec, RowWriter]:
        """A row record (Key or Value), how to convert a row dict to it (for fastavro), and how to write
        it directly (the encoders' path)."""
        fields = []
        work = []
        plain = []
        renames = {}
        for column in columns:
            avro_field = avro_name(column.name)
            if avro_field != column.name:
                renames[column.name] = avro_field
            required = column.kind == ColumnKind.PARTITION_KEY
            path = (*base, avro_field)
            avro = self.type_of(column.type, path) if required else self.nullable(column.type, path)
            field: dict[str, Any] = {"name": avro_field, "type": avro.schema}
            if not required:
                field["default"] = None
            field["cql_name"] = column.name
            field["cql_type"] = column.type.cql()
            fields.append(field)
            conv = avro.conv if required else _wrap(avro.conv, avro.branch)
            if conv is not None or required:
                work.append((column.name, conv, None, required))
            plain.append(avro.conv)
        record = {"type": "record", "name": name, "fields": fields}
        names = frozenset(c.name for c in columns)
        named: dict[str, Writer] = {}
        columns_out = [
            (column.name, column_writer(field["type"], conv, column.kind == ColumnKind.PARTITION_KEY, named))
            for column, field, conv in zip(columns, fields, plain, strict=True)
        ]
        return record, RowSpec(names, work, renames or None), RowWriter(names, columns_out)
