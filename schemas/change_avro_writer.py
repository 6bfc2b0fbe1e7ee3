"""Avro binary writing of change events: one writer closure per schema node, compiled once per table.

The encoders write Avro's binary form themselves, straight from the converted column values. fastavro
stays the reader and the reference: tests check that both write the same bytes. Going around fastavro's
generic writer matters here because every column is a ["null", T] union, which it resolves by trial
validation of each branch, and because its input would be a converted copy of every row: key and value
of a 10-column update took ~35 µs through fastavro, ~20 µs this way (bench/change_codec.md).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from schemas.change_avro_names import avro_fullname
from schemas.change_codec import ChangeEncodingError
from schemas.change_conversions import Converter, check_columns
from schemas.change_event import ChangeEventError

Writer = Callable[[bytearray, Any], None]

_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1
_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_F32_LE = struct.Struct("<f")
_F64_LE = struct.Struct("<d")


def write_long(out: bytearray, n: int) -> None:
    """Avro long: zigzag, then base-128 varint, least significant group first."""
    if -64 <= n < 64:
        out.append(n << 1 if n >= 0 else (~n << 1) | 1)
        return
    if not _LONG_MIN <= n <= _LONG_MAX:
        raise ValueError(f"{n} does not fit an Avro long")
    z = (n << 1) ^ (n >> 63)
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)


def _write_int(out: bytearray, n: int) -> None:
    if not _INT_MIN <= n <= _INT_MAX:
        raise ValueError(f"{n} does not fit an Avro int")
    write_long(out, n)


def write_string(out: bytearray, v: str) -> None:
    data = v.encode()
    write_long(out, len(data))
    out += data


def _write_bytes(out: bytearray, v: bytes) -> None:
    if not isinstance(v, bytes | bytearray | memoryview):
        raise TypeError(f"expected bytes, got {type(v).__name__}")
    write_long(out, len(v))
    out += v


def _write_boolean(out: bytearray, v: bool) -> None:
    if v is True:
        out.append(1)
    elif v is False:
        out.append(0)
    else:
        raise TypeError(f"expected a boolean, got {type(v).__name__}")


def _write_float(out: bytearray, v: float) -> None:
    out += _F32_LE.pack(v)


def _write_double(out: bytearray, v: float) -> None:
    out += _F64_LE.pack(v)


def _write_null(out: bytearray, v: None) -> None:
    if v is not None:
        raise TypeError(f"expected null, got {type(v).__name__}")


_PRIMITIVE_WRITERS: dict[str, Writer] = {
    "null": _write_null,
    "boolean": _write_boolean,
    "int": _write_int,
    "long": write_long,
    "float": _write_float,
    "double": _write_double,
    "bytes": _write_bytes,
    "string": write_string,
}


def schema_writer(schema: Any, namespace: str, named: dict[str, Writer]) -> Writer:
    """A writer of Avro-form values for a node of a schema this module generates (primitives, records,
    arrays, maps, ``["null", T]`` unions, references to records defined earlier in the document)."""
    if isinstance(schema, str):
        primitive = _PRIMITIVE_WRITERS.get(schema)
        if primitive is not None:
            return primitive
        found = named.get(avro_fullname(schema, namespace)) or named.get(schema)
        if found is None:
            raise TypeError(f"Avro type {schema!r} is used before it is defined")
        return found
    if isinstance(schema, list):
        if len(schema) != 2 or schema[0] != "null":
            raise TypeError(f"only [null, T] unions are written here, not {schema}")
        inner = schema_writer(schema[1], namespace, named)

        def union(out: bytearray, v: Any) -> None:
            if v is None:
                out.append(0)
                return
            out.append(2)
            inner(out, v[1] if type(v) is tuple else v)  # fastavro's tuple notation names the branch

        return union
    kind = schema["type"]
    if kind == "record":
        fullname = avro_fullname(schema["name"], schema.get("namespace", namespace))
        inner_ns = fullname.rpartition(".")[0]
        fields = [(f["name"], schema_writer(f["type"], inner_ns, named)) for f in schema["fields"]]

        def record(out: bytearray, v: dict[str, Any]) -> None:
            for name, write in fields:
                write(out, v[name])

        named[fullname] = record
        return record
    if kind == "array":
        items = schema_writer(schema["items"], namespace, named)

        def array(out: bytearray, v: list[Any]) -> None:
            if v:
                write_long(out, len(v))
                for x in v:
                    items(out, x)
            out.append(0)

        return array
    if kind == "map":
        values = schema_writer(schema["values"], namespace, named)

        def map_(out: bytearray, v: dict[str, Any]) -> None:
            if v:
                write_long(out, len(v))
                for k, x in v.items():
                    write_string(out, k)
                    values(out, x)
            out.append(0)

        return map_
    if isinstance(kind, str) and kind in _PRIMITIVE_WRITERS:  # {"type": "long", "logicalType": ...}
        return _PRIMITIVE_WRITERS[kind]
    return schema_writer(kind, namespace, named)


def column_writer(schema: Any, conv: Converter | None, required: bool, named: dict[str, Writer]) -> Writer:
    """One column of a row record: null check, conversion and writing fused in one call (the hot loop).

    Nullable strings, the commonest columns, are written inline rather than through the union writer.
    """
    if required:
        write = schema_writer(schema, "", named)

        def required_column(out: bytearray, v: Any) -> None:
            if v is None:
                raise ValueError("a primary key column cannot be null")
            write(out, v if conv is None else conv(v))

        return required_column
    inner_schema = schema[1] if isinstance(schema, list) else schema
    if isinstance(inner_schema, dict) and inner_schema.get("type") in _PRIMITIVE_WRITERS:
        inner_schema = inner_schema["type"]
    if schema == "null":
        return _write_null
    if inner_schema == "string":
        if conv is None:

            def string_column(out: bytearray, v: Any) -> None:
                if v is None:
                    out.append(0)
                    return
                data = v.encode()
                size = len(data)
                if size < 64:
                    out.append(2)
                    out.append(size << 1)
                else:
                    out.append(2)
                    write_long(out, size)
                out += data

            return string_column

        def converted_string_column(out: bytearray, v: Any) -> None:
            if v is None:
                out.append(0)
                return
            data = conv(v).encode()
            size = len(data)
            if size < 64:
                out.append(2)
                out.append(size << 1)
            else:
                out.append(2)
                write_long(out, size)
            out += data

        return converted_string_column
    write = schema_writer(inner_schema, "", named)
    if conv is None:

        def column(out: bytearray, v: Any) -> None:
            if v is None:
                out.append(0)
            else:
                out.append(2)
                write(out, v)

        return column

    def converted_column(out: bytearray, v: Any) -> None:
        if v is None:
            out.append(0)
        else:
            out.append(2)
            write(out, conv(v))

    return converted_column


@dataclass(slots=True)
class RowWriter:
    """How to write a row dict (CQL names, Python values) as an Avro record, column by column."""

    names: frozenset[str]
    #: (column, writer of its value) in record order
    columns: list[tuple[str, Writer]]


def write_row(row_writer: RowWriter, row: dict[str, Any], table: str, out: bytearray) -> None:
    if row.keys() != row_writer.names:
        check_columns(row_writer.names, row, table)
    name = ""
    try:
        for name, write in row_writer.columns:
            write(out, row[name])
    except ChangeEventError:
        raise
    except Exception as exc:
        raise ChangeEncodingError(
            f"cannot encode {type(row[name]).__name__} value {row[name]!r:.120}: {exc}",
            table=table,
            column=name,
        ) from exc
