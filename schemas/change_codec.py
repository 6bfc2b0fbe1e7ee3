"""Change-event codecs: the Kafka key and value bytes of a change event, as JSON or as Confluent Avro.

Both codecs take the key dict of ``change_key`` and the envelope of ``change_envelope`` (Python values as
``state.decode_row`` gives them) and compile, once per TableSchema object, one converter (JSON) or one
writer (Avro) per column, so encoding a row is one call per column that needs work. ``encode_change``
gives both bytes of one change; the JSON codec makes them straight from the row images' cell bytes
(``schemas.json_row_form``), the same bytes with one step less per value.

Value mapping per CQL type; ``decode_key``/``decode_value`` return exactly this form (Avro record fields
under their CQL names again):

=====================  ===============================  =============================================
CQL                    JSON                             Avro (registered schema; written form)
=====================  ===============================  =============================================
ascii, text, varchar   string                           string
boolean                true/false                       boolean
tinyint/smallint/int   number                           int
bigint, counter        number                           long
varint                 string of decimal digits         string of decimal digits
float, double          number; "NaN", "Infinity",       float, double (NaN and infinities native)
                       "-Infinity" as strings
decimal                string, ``str(Decimal)`` (exact, record cdc.change.Decimal {unscaled: bytes
                       keeps the scale: "1.50", "1E+3") (big-endian two's complement), scale: int}
date                   int, days since 1970-01-01       int, logicalType date (days since 1970-01-01)
time                   int, nanoseconds since midnight  long, nanoseconds since midnight (no logical
                                                        type: time-micros would drop the last 3 digits)
timestamp              int, milliseconds since the      long, logicalType timestamp-millis
                       epoch (UTC)
uuid, timeuuid         string (lowercase, hyphenated)   string, logicalType uuid
inet                   string ("10.0.0.1", "::1")       string
blob, custom types     string, base64 (RFC 4648, pad)   bytes
duration               {"months", "days", "nanos"}      record cdc.change.Duration {months: int,
                                                        days: int, nanos: long}
list, set, vector      array (sets in Cassandra order)  array
map<text|ascii, V>     object                           map
map<other K, V>        array of [key, value] pairs      array of record Entry {key, value}
tuple                  array (nulls for null elements)  record Tuple {f0, f1, ...}, each nullable
UDT (frozen or not)    object by field name             record <udt name>, fields nullable
=====================  ===============================  =============================================

JSON keys are written compact with sorted object keys, so equal primary keys always give equal bytes (log
compaction compares key bytes). JSON numbers beyond 2**53 lose precision in many JSON parsers, which is
why varint is a string; bigint and counter stay numbers, as in Debezium.

Dates are days and timestamps milliseconds (not ISO strings) in JSON too: CQL dates and timestamps reach
millions of years either side of 1970, beyond Python's date and plain four-digit-year ISO 8601 strings.
(Python consumers reading the Avro bytes with fastavro's logical types hit the same wall: fastavro raises
on dates and timestamps outside years 1..9999. This codec's own decoder does not.)

Avro: one Key record (partition key fields required, clustering fields nullable for the static-only row),
one Envelope ``{before, after: ["null", Value], op, source: cdc.change.Source, ts_ms}``; every non-key
column is nullable with default null. Records are named ``<namespace>.<keyspace>.<table>.Key/Value/
Envelope``; a nested record is named after its path from the column (``...<table>.<column>.Tuple``,
``...<column>.element.<udt>``, ``...<column>.Entry``), so adding a column never renames another's types.
Collection elements, map keys and values are not nullable (CQL has no null elements); a null there
(only an empty value of a non-string element type decodes to one) is an encoding error. Every column
field carries ``cql_name`` and ``cql_type`` attributes for consumers.

Avro names: a CQL name that matches ``[A-Za-z][A-Za-z0-9_]*`` is kept; any other (quoted identifiers
with spaces, dashes, non-ASCII letters, a leading ``_`` or digit) becomes ``_`` followed by each
character, ASCII letters and digits as they are and every other character as ``_<hex code point>_``:
``my-col`` -> ``_my_2d_col``, ``_id`` -> ``__5f_id``, ``1st`` -> ``_1st``. Kept names start with a letter
and escaped ones with ``_``, and the escape is decodable (``cql_name_of``), so two CQL names never meet.

The Avro codec writes the binary form itself (see "Avro binary writing"; tests check it byte for byte
against fastavro) and decodes with fastavro and the writer's schema from the registry stripped of
logical types (same binary form), so values come back in the primitive form above. Framing is
Confluent's: byte 0x00, the 4-byte big-endian schema id, the Avro body. Registration is a blocking
registry call once per TableSchema object; ``await codec.prepare(schema)`` does it in a thread.
"""

from __future__ import annotations

import asyncio
import binascii
import datetime as _dt
import decimal
import io
import json
import re
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from fastavro import parse_schema, schemaless_reader

from cassandra_model.cql_types import (
    CqlTime,
    CqlType,
    CustomType,
    ListType,
    MapType,
    NativeType,
    SetType,
    TupleType,
    UserType,
    VectorType,
)
from cassandra_model.table_schema import ColumnKind, ColumnSchema, TableSchema
from schemas import SCHEMA_DIR
from schemas.change_event import (
    OPS,
    ChangeEventError,
    ChangeSource,
    change_envelope,
    clean_topic_name,
    envelope_key,
    envelope_op,
)
from schemas.json_row_form import JsonRowForm
from schemas.registry_client import SchemaRegistryClient
from state.change import RowChange

Converter = Callable[[Any], Any]

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
_EPOCH_ORDINAL = _dt.date(1970, 1, 1).toordinal()
_ONE_MS = _dt.timedelta(milliseconds=1)
_FRAME = struct.Struct(">bI")
_MAGIC = 0

#: namespace of the records every table shares (Source, Decimal, Duration)
SHARED_NAMESPACE = "cdc.change"


class ChangeEncodingError(ChangeEventError):
    """A value that does not fit its column's mapping; names the table and, when known, the column."""

    def __init__(self, message: str, *, table: str, column: str | None = None) -> None:
        where = f"{table}.{column}" if column is not None else table
        super().__init__(f"{where}: {message}")
        self.table = table
        self.column = column


class ChangeDecodingError(ChangeEventError):
    """Key or value bytes that are not a change event of this codec."""


class ChangeCodec(Protocol):
    """Key and value bytes of change events for one encoding."""

    def encode_key(self, schema: TableSchema, key: dict[str, Any]) -> bytes:
        """The Kafka key: the primary key columns of ``change_key`` (also the key of a tombstone)."""
        ...

    def encode_value(self, schema: TableSchema, envelope: dict[str, Any]) -> bytes:
        """The Kafka value: the envelope of ``change_envelope``."""
        ...

    def decode_key(self, data: bytes) -> dict[str, Any]:
        """A key in the documented form (for tests and consumers)."""
        ...

    def decode_value(self, data: bytes) -> dict[str, Any]:
        """An envelope in the documented form (for tests and consumers)."""
        ...

    async def prepare(self, schema: TableSchema) -> None:
        """Do the slow once-per-schema work (registry calls) off the event loop, before encoding."""
        ...

    def encode_change(
        self, schema: TableSchema, change: RowChange, source: ChangeSource, ts_ms: int
    ) -> tuple[bytes, bytes]:
        """Key and value of one change: ``encode_key`` of its ``envelope_key`` and ``encode_value`` of its
        ``change_envelope``, or the same bytes made a faster way."""
        ...


def encode_change_via_envelope(
    codec: ChangeCodec, schema: TableSchema, change: RowChange, source: ChangeSource, ts_ms: int
) -> tuple[bytes, bytes]:
    """``ChangeCodec.encode_change`` through the envelope of Python values (the reference path)."""
    envelope = change_envelope(change, schema, source, ts_ms)
    return codec.encode_key(schema, envelope_key(schema, envelope)), codec.encode_value(schema, envelope)


# ---------------------------------------------------------------------------------------------------------
# Avro names


_PLAIN_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")
_ESCAPED_PART = re.compile(r"[A-Za-z0-9]|_([0-9a-f]+)_")


def avro_name(name: str) -> str:
    """The Avro name of a CQL name (column, field, type, keyspace, table): see the module notes."""
    if _PLAIN_NAME.match(name):
        return name
    return "_" + "".join(c if c.isascii() and c.isalnum() else f"_{ord(c):x}_" for c in name)


def cql_name_of(name: str) -> str:
    """The CQL name an ``avro_name`` came from; ValueError for a name it cannot have produced."""
    if not name.startswith("_"):
        if not _PLAIN_NAME.match(name):
            raise ValueError(f"{name!r} is not an Avro name made by avro_name")
        return name
    out = []
    pos = 1
    while pos < len(name):
        match = _ESCAPED_PART.match(name, pos)
        if match is None:
            raise ValueError(f"{name!r} is not an Avro name made by avro_name")
        code = match.group(1)
        out.append(match.group(0) if code is None else chr(int(code, 16)))
        pos = match.end()
    return "".join(out)


def avro_decimal(value: dict[str, Any]) -> decimal.Decimal:
    """The Decimal of a decoded Avro ``cdc.change.Decimal`` record."""
    unscaled = int.from_bytes(value["unscaled"], "big", signed=True)
    return decimal.Decimal(unscaled).scaleb(-value["scale"], decimal.Context(prec=decimal.MAX_PREC))


# ---------------------------------------------------------------------------------------------------------
# scalar conversions shared by both codecs (the decoder's Python values, and their fallback forms)


def _days(v: Any) -> int:
    return v if type(v) is int else v.toordinal() - _EPOCH_ORDINAL


def _millis(v: Any) -> int:
    if type(v) is int:
        return v
    if v.tzinfo is None:  # naive: UTC, as fastavro and the driver read it
        v = v.replace(tzinfo=_dt.UTC)
    return (v - _EPOCH) // _ONE_MS


def _nanos_of_day(v: Any) -> int:
    if type(v) is CqlTime:
        return v.nanoseconds
    if isinstance(v, _dt.time):
        return ((v.hour * 60 + v.minute) * 60 + v.second) * 1_000_000_000 + v.microsecond * 1000
    if hasattr(v, "nanosecond_time"):  # cassandra.util.Time
        return int(v.nanosecond_time)
    return int(v)


def _duration(v: Any) -> dict[str, int]:
    return {"months": v.months, "days": v.days, "nanos": v.nanoseconds}


def _json_float(v: float) -> float | str:
    if v - v == 0:  # finite
        return v
    return "NaN" if v != v else ("Infinity" if v > 0 else "-Infinity")


def _base64(v: Any) -> str:
    return binascii.b2a_base64(v, newline=False).decode("ascii")


def _avro_decimal(v: Any) -> dict[str, Any]:
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


def _null(v: Any) -> None:
    return None


def _items(v: Any) -> Iterable[tuple[Any, Any]]:
    """Map entries: the decoder gives a dict, or (key, value) pairs when keys are not hashable."""
    return v.items() if isinstance(v, dict) else v


def _as_list(v: Any) -> list[Any]:
    return v if type(v) is list else list(v)


def _is_text(t: CqlType) -> bool:
    return isinstance(t, NativeType) and t.name in ("text", "ascii")


def _unsupported(t: CqlType) -> TypeError:
    return TypeError(f"no change-event mapping for CQL type {t.cql()}")


# ---------------------------------------------------------------------------------------------------------
# per-table row converters


@dataclass(slots=True)
class _RowSpec:
    """How to turn a row dict (CQL names, Python values) into the wire form of one record."""

    names: frozenset[str]
    #: (column, converter or None, union branch name or None, required) for columns that need work
    work: list[tuple[str, Converter | None, str | None, bool]]
    #: CQL name -> Avro name where they differ (None: no renaming)
    renames: dict[str, str] | None


def _check_columns(names: frozenset[str], row: dict[str, Any], table: str) -> None:
    if row.keys() != names:
        missing = sorted(names - row.keys())
        extra = sorted(row.keys() - names)
        raise ChangeEncodingError(
            f"row columns do not match the table schema (missing {missing}, unknown {extra})",
            table=table,
            column=(missing or extra)[0],
        )


def _convert_row(spec: _RowSpec, row: dict[str, Any], table: str) -> dict[str, Any]:
    if row.keys() != spec.names:
        _check_columns(spec.names, row, table)
    out = dict(row)
    name = ""
    try:
        for name, conv, branch, required in spec.work:
            v = out[name]
            if v is None:
                if required:
                    raise ValueError("a primary key column cannot be null")
                continue
            if conv is not None:
                v = conv(v)
            if branch is not None:
                v = (branch, v)
            out[name] = v
    except ChangeEventError:
        raise
    except Exception as exc:
        raise ChangeEncodingError(
            f"cannot encode {type(out[name]).__name__} value {out[name]!r:.120}: {exc}",
            table=table,
            column=name,
        ) from exc
    renames = spec.renames
    if renames is not None:
        out = {renames.get(k, k): v for k, v in out.items()}
    return out


def _key_columns(schema: TableSchema) -> list[ColumnSchema]:
    return [*schema.partition_key, *schema.clustering]


# ---------------------------------------------------------------------------------------------------------
# JSON


_JSON_SCALARS: dict[str, Converter | None] = {
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
    "date": _days,
    "time": _nanos_of_day,
    "timestamp": _millis,
    "uuid": str,
    "timeuuid": str,
    "inet": str,
    "duration": _duration,
    "blob": _base64,
    "empty": _null,
}


def _json_converter(t: CqlType) -> Converter | None:
    """The JSON form of one non-null value of type ``t`` (None: the value is already JSON)."""
    if isinstance(t, NativeType):
        return _JSON_SCALARS[t.name]
    if isinstance(t, CustomType):
        return _base64
    if isinstance(t, ListType | SetType | VectorType):
        elem = _json_converter(t.element)
        if elem is None:
            return _as_list
        return lambda v: [None if x is None else elem(x) for x in v]
    if isinstance(t, MapType):
        kc = _json_converter(t.key)
        vc = _json_converter(t.value)
        if _is_text(t.key):
            if vc is None:
                return lambda v: dict(_items(v))
            return lambda v: {k: None if x is None else vc(x) for k, x in _items(v)}
        return lambda v: [
            [k if k is None or kc is None else kc(k), x if x is None or vc is None else vc(x)]
            for k, x in _items(v)
        ]
    if isinstance(t, TupleType):
        convs = [_json_converter(e) for e in t.elements]
        return lambda v: [x if x is None or c is None else c(x) for c, x in zip(convs, v, strict=True)]
    if isinstance(t, UserType):
        fields = [(n, _json_converter(ft)) for n, ft in zip(t.field_names, t.field_types, strict=True)]

        def udt(v: dict[str, Any]) -> dict[str, Any]:
            get = v.get
            return {n: x if (x := get(n)) is None or c is None else c(x) for n, c in fields}

        return udt
    raise _unsupported(t)


def _json_spec(columns: Iterable[ColumnSchema]) -> _RowSpec:
    columns = list(columns)
    work = []
    for column in columns:
        conv = _json_converter(column.type)
        if conv is not None:
            work.append((column.name, conv, None, False))
    return _RowSpec(frozenset(c.name for c in columns), work, None)


@dataclass(slots=True)
class _JsonTable:
    key: _RowSpec
    row: _RowSpec
    form: JsonRowForm


_KEY_JSON = json.JSONEncoder(ensure_ascii=False, allow_nan=False, sort_keys=True, separators=(",", ":"))
_VALUE_JSON = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


class JsonChangeCodec:
    """Change events as UTF-8 JSON (mapping in the module notes); keys compact with sorted object keys."""

    def __init__(self) -> None:
        self._tables: dict[int, tuple[TableSchema, _JsonTable]] = {}

    def _table(self, schema: TableSchema) -> _JsonTable:
        found = self._tables.get(id(schema))
        if found is not None and found[0] is schema:
            return found[1]
        try:
            table = _JsonTable(
                _json_spec(_key_columns(schema)),
                _json_spec(schema.all_columns()),
                JsonRowForm(schema, _json_converter),
            )
        except TypeError as exc:
            raise ChangeEncodingError(str(exc), table=schema.name) from exc
        if len(self._tables) > 4096:
            self._tables.clear()
        self._tables[id(schema)] = (schema, table)
        return table

    async def prepare(self, schema: TableSchema) -> None:
        self._table(schema)

    def encode_key(self, schema: TableSchema, key: dict[str, Any]) -> bytes:
        row = _convert_row(self._table(schema).key, key, schema.name)
        return _KEY_JSON.encode(row).encode()

    def encode_change(
        self, schema: TableSchema, change: RowChange, source: ChangeSource, ts_ms: int
    ) -> tuple[bytes, bytes]:
        """Images straight to their JSON form (``json_row_form``); anything unusual (an error included)
        takes the envelope path, which writes the same bytes or raises the error it names."""
        form = self._table(schema).form
        op = envelope_op(change, schema, source)
        try:
            before = None if change.before is None else form.row(change.before)
            after = None if change.after is None else form.row(change.after)
            row = after if after is not None else before
            assert row is not None  # envelope_op checked the images
            key = _KEY_JSON.encode({name: row[name] for name in form.key_names}).encode()
            value = _VALUE_JSON.encode(
                {"before": before, "after": after, "op": op, "source": source.as_dict(), "ts_ms": ts_ms}
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
            "before": None if before is None else _convert_row(table.row, before, schema.name),
            "after": None if after is None else _convert_row(table.row, after, schema.name),
            "op": envelope["op"],
            "source": envelope["source"],
            "ts_ms": envelope["ts_ms"],
        }
        try:
            return _VALUE_JSON.encode(value).encode()
        except (TypeError, ValueError) as exc:
            raise ChangeEncodingError(f"envelope is not JSON-serializable: {exc}", table=schema.name) from exc

    def decode_key(self, data: bytes) -> dict[str, Any]:
        return self._decode(data, "key")

    def decode_value(self, data: bytes) -> dict[str, Any]:
        return self._decode(data, "value")

    @staticmethod
    def _decode(data: bytes, what: str) -> dict[str, Any]:
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
    return _convert_row(_ROWS_AS_JSON._table(schema).row, row, schema.name)


# ---------------------------------------------------------------------------------------------------------
# Avro binary writing
#
# The encoders write Avro's binary form themselves, straight from the converted column values, with one
# writer closure per schema node compiled once per table. fastavro stays the reader and the reference:
# tests check that both write the same bytes. Going around fastavro's generic writer matters here because
# every column is a ["null", T] union, which it resolves by trial validation of each branch, and because
# its input would be a converted copy of every row: key and value of a 10-column update took ~35 µs
# through fastavro, ~20 µs this way (bench/change_codec.md).

Writer = Callable[[bytearray, Any], None]

_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1
_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_F32_LE = struct.Struct("<f")
_F64_LE = struct.Struct("<d")


def _write_long(out: bytearray, n: int) -> None:
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
    _write_long(out, n)


def _write_string(out: bytearray, v: str) -> None:
    data = v.encode()
    _write_long(out, len(data))
    out += data


def _write_bytes(out: bytearray, v: bytes) -> None:
    if not isinstance(v, bytes | bytearray | memoryview):
        raise TypeError(f"expected bytes, got {type(v).__name__}")
    _write_long(out, len(v))
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
    "long": _write_long,
    "float": _write_float,
    "double": _write_double,
    "bytes": _write_bytes,
    "string": _write_string,
}


def _fullname(name: str, namespace: str) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


def _writer(schema: Any, namespace: str, named: dict[str, Writer]) -> Writer:
    """A writer of Avro-form values for a node of a schema this module generates (primitives, records,
    arrays, maps, ``["null", T]`` unions, references to records defined earlier in the document)."""
    if isinstance(schema, str):
        primitive = _PRIMITIVE_WRITERS.get(schema)
        if primitive is not None:
            return primitive
        found = named.get(_fullname(schema, namespace)) or named.get(schema)
        if found is None:
            raise TypeError(f"Avro type {schema!r} is used before it is defined")
        return found
    if isinstance(schema, list):
        if len(schema) != 2 or schema[0] != "null":
            raise TypeError(f"only [null, T] unions are written here, not {schema}")
        inner = _writer(schema[1], namespace, named)

        def union(out: bytearray, v: Any) -> None:
            if v is None:
                out.append(0)
                return
            out.append(2)
            inner(out, v[1] if type(v) is tuple else v)  # fastavro's tuple notation names the branch

        return union
    kind = schema["type"]
    if kind == "record":
        fullname = _fullname(schema["name"], schema.get("namespace", namespace))
        inner_ns = fullname.rpartition(".")[0]
        fields = [(f["name"], _writer(f["type"], inner_ns, named)) for f in schema["fields"]]

        def record(out: bytearray, v: dict[str, Any]) -> None:
            for name, write in fields:
                write(out, v[name])

        named[fullname] = record
        return record
    if kind == "array":
        items = _writer(schema["items"], namespace, named)

        def array(out: bytearray, v: list[Any]) -> None:
            if v:
                _write_long(out, len(v))
                for x in v:
                    items(out, x)
            out.append(0)

        return array
    if kind == "map":
        values = _writer(schema["values"], namespace, named)

        def map_(out: bytearray, v: dict[str, Any]) -> None:
            if v:
                _write_long(out, len(v))
                for k, x in v.items():
                    _write_string(out, k)
                    values(out, x)
            out.append(0)

        return map_
    if isinstance(kind, str) and kind in _PRIMITIVE_WRITERS:  # {"type": "long", "logicalType": ...}
        return _PRIMITIVE_WRITERS[kind]
    return _writer(kind, namespace, named)


def _column_writer(schema: Any, conv: Converter | None, required: bool, named: dict[str, Writer]) -> Writer:
    """One column of a row record: null check, conversion and writing fused in one call (the hot loop).

    Nullable strings, the commonest columns, are written inline rather than through the union writer.
    """
    if required:
        write = _writer(schema, "", named)

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
                    _write_long(out, size)
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
                _write_long(out, size)
            out += data

        return converted_string_column
    write = _writer(inner_schema, "", named)
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
class _RowWriter:
    """How to write a row dict (CQL names, Python values) as an Avro record, column by column."""

    names: frozenset[str]
    #: (column, writer of its value) in record order
    columns: list[tuple[str, Writer]]


def _write_row(row_writer: _RowWriter, row: dict[str, Any], table: str, out: bytearray) -> None:
    if row.keys() != row_writer.names:
        _check_columns(row_writer.names, row, table)
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


# ---------------------------------------------------------------------------------------------------------
# Avro schemas


def _shared_records() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    source = json.loads((SCHEMA_DIR / "change_source.avsc").read_text())
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
    return source, dec, duration


_SOURCE_RECORD, _DECIMAL_RECORD, _DURATION_RECORD = _shared_records()
_write_source = _writer(_SOURCE_RECORD, "", {})

#: native type -> (Avro type, converter); named records are filled in by the builder
_AVRO_SCALARS: dict[str, tuple[Any, Converter | None]] = {
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
    "date": ({"type": "int", "logicalType": "date"}, _days),
    "time": ("long", _nanos_of_day),
    "timestamp": ({"type": "long", "logicalType": "timestamp-millis"}, _millis),
    "uuid": ({"type": "string", "logicalType": "uuid"}, str),
    "timeuuid": ({"type": "string", "logicalType": "uuid"}, str),
    "inet": ("string", str),
    "blob": ("bytes", None),
    "empty": ("null", _null),
}


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


class _AvroBuilder:
    """Generates one Avro schema document (key or value) for a table; a named type is defined at its
    first use and referenced by name afterwards."""

    def __init__(self) -> None:
        self.defined: set[str] = set()

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
        if isinstance(t, NativeType):
            if t.name == "decimal":
                return _AvroType(self.named(_DECIMAL_RECORD), _avro_decimal, _DECIMAL_RECORD["name"])
            if t.name == "duration":
                return _AvroType(self.named(_DURATION_RECORD), _duration, _DURATION_RECORD["name"])
            schema, conv = _AVRO_SCALARS[t.name]
            return _AvroType(schema, conv)
        if isinstance(t, CustomType):
            return _AvroType("bytes", None)
        if isinstance(t, ListType | SetType | VectorType):
            elem = self.type_of(t.element, (*path, "element"))
            conv = elem.conv
            if conv is None:
                return _AvroType(
                    {"type": "array", "items": elem.schema}, lambda v: _no_nulls(_as_list(v)), "array"
                )
            return _AvroType(
                {"type": "array", "items": elem.schema},
                lambda v: [conv(x) for x in _no_nulls(_as_list(v))],
                "array",
            )
        if isinstance(t, MapType):
            return self.map_type(t, path)
        if isinstance(t, TupleType):
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
        if isinstance(t, UserType):
            name = ".".join((*path, avro_name(t.name)))
            fields = []
            specs = []
            for field_name, field_type in zip(t.field_names, t.field_types, strict=True):
                avro_field = avro_name(field_name)
                field = self.nullable(field_type, (*path, avro_field))
                fields.append(
                    {"name": avro_field, "type": field.schema, "default": None, "cql_name": field_name}
                )
                specs.append((field_name, avro_field, _wrap(field.conv, field.branch)))
            record = {"type": "record", "name": name, "cql_type": t.freeze().cql(), "fields": fields}

            def udt_record(v: dict[str, Any]) -> dict[str, Any]:
                get = v.get
                return {a: x if (x := get(n)) is None or c is None else c(x) for n, a, c in specs}

            return _AvroType(record, udt_record, name)
        raise _unsupported(t)

    def map_type(self, t: MapType, path: tuple[str, ...]) -> _AvroType:
        value = self.type_of(t.value, (*path, "value"))
        vc = value.conv
        if _is_text(t.key):
            schema = {"type": "map", "values": value.schema}

            def text_map(v: Any) -> dict[str, Any]:
                out = dict(_items(v))
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
            for k, x in _items(v):
                if k is None or x is None:
                    raise ValueError("a map key or value is null (an empty value?); Avro maps hold no nulls")
                out.append({"key": k if kc is None else kc(k), "value": x if vc is None else vc(x)})
            return out

        return _AvroType({"type": "array", "items": entry}, entries, "array")

    def record(
        self, name: str, columns: list[ColumnSchema], base: tuple[str, ...]
    ) -> tuple[dict[str, Any], _RowSpec, _RowWriter]:
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
            (column.name, _column_writer(field["type"], conv, column.kind == ColumnKind.PARTITION_KEY, named))
            for column, field, conv in zip(columns, fields, plain, strict=True)
        ]
        return record, _RowSpec(names, work, renames or None), _RowWriter(names, columns_out)


def _strip_logical_types(schema: Any) -> Any:
    """The same schema without logical types: same binary form, values stay primitive."""
    if isinstance(schema, dict):
        return {k: _strip_logical_types(v) for k, v in schema.items() if k != "logicalType"}
    if isinstance(schema, list):
        return [_strip_logical_types(v) for v in schema]
    return schema


def without_branches(value: Any) -> Any:
    """A written Avro record with fastavro's union tuple notation ``(branch, value)`` removed (what
    fastavro's validation expects)."""
    if isinstance(value, tuple):
        return without_branches(value[1])
    if isinstance(value, dict):
        return {k: without_branches(v) for k, v in value.items()}
    if isinstance(value, list):
        return [without_branches(v) for v in value]
    return value


# ---------------------------------------------------------------------------------------------------------
# Avro decoding: field names back to CQL names


def _renamer(schema: Any, namespace: str, named: dict[str, Converter | None]) -> Converter | None:
    """A function giving decoded records their CQL field names (None: nothing to rename)."""
    if isinstance(schema, str):
        return named.get(_fullname(schema, namespace), named.get(schema))
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        if len(branches) != 1:
            return None
        inner = _renamer(branches[0], namespace, named)
        return None if inner is None else (lambda v: None if v is None else inner(v))
    kind = schema.get("type")
    if kind == "array":
        items = _renamer(schema["items"], namespace, named)
        return None if items is None else (lambda v: [items(x) for x in v])
    if kind == "map":
        values = _renamer(schema["values"], namespace, named)
        return None if values is None else (lambda v: {k: values(x) for k, x in v.items()})
    if kind == "record":
        fullname = _fullname(schema["name"], schema.get("namespace", namespace))
        inner_ns = fullname.rpartition(".")[0]
        named[fullname] = None  # no recursive types here
        fields = []
        work = False
        for field in schema["fields"]:
            name = field["name"]
            out = field.get("cql_name", name)
            sub = _renamer(field["type"], inner_ns, named)
            work = work or sub is not None or out != name
            fields.append((name, out, sub))
        if not work:
            return None

        def record(v: dict[str, Any]) -> dict[str, Any]:
            return {out: (v[name] if sub is None else sub(v[name])) for name, out, sub in fields}

        named[fullname] = record
        return record
    if isinstance(kind, dict | list):
        return _renamer(kind, namespace, named)
    return None


@dataclass(slots=True)
class _AvroReader:
    schema: Any
    rename: Converter | None


# ---------------------------------------------------------------------------------------------------------
# the Avro codec


@dataclass(slots=True)
class _AvroTable:
    """What one TableSchema object needs for Avro: generated schemas, writers, converters, registry ids."""

    name: str
    key_subject: str
    value_subject: str
    key_schema: dict[str, Any]
    value_schema: dict[str, Any]
    key_json: str
    value_json: str
    key_spec: _RowSpec
    row_spec: _RowSpec
    key_writer: _RowWriter
    row_writer: _RowWriter
    value_name: str
    key_header: bytes | None = None
    value_header: bytes | None = None


class AvroChangeCodec:
    """Change events as Avro in the Confluent wire format, schemas registered per table schema version.

    Subjects follow TopicNameStrategy on the clean topic ``<topic_prefix>.<keyspace>.<table>``:
    ``<topic>-key`` and ``<topic>-value``; pass the worker's clean topic prefix (the default is the
    config's default, ``cdc``). Record names start with ``namespace`` (default: the topic
    prefix, each dot-separated part made an Avro name). The first encode of a new TableSchema object
    registers both schemas (a blocking registry call unless ``await prepare(schema)`` did it before);
    after that, encoding touches only caches.
    """

    def __init__(
        self, registry: SchemaRegistryClient, topic_prefix: str = "cdc", *, namespace: str | None = None
    ) -> None:
        clean_topic_name(topic_prefix, "ks", "table")  # validate the prefix early
        self.registry = registry
        self.topic_prefix = topic_prefix
        namespace = namespace if namespace is not None else topic_prefix
        if not namespace:
            raise ValueError("the Avro namespace of change events cannot be empty")
        self.namespace = ".".join(avro_name(part) for part in namespace.split("."))
        self._tables: dict[int, tuple[TableSchema, _AvroTable]] = {}
        self._readers: dict[int, _AvroReader] = {}

    # -- schemas

    def _table(self, schema: TableSchema) -> _AvroTable:
        found = self._tables.get(id(schema))
        if found is not None and found[0] is schema:
            return found[1]
        table = self._compile(schema)
        if len(self._tables) > 4096:
            self._tables.clear()
        self._tables[id(schema)] = (schema, table)
        return table

    def _compile(self, schema: TableSchema) -> _AvroTable:
        topic = clean_topic_name(self.topic_prefix, schema.keyspace, schema.table)
        base = (self.namespace, avro_name(schema.keyspace), avro_name(schema.table))
        prefix = ".".join(base)
        try:
            key_schema, key_spec, key_writer = _AvroBuilder().record(
                f"{prefix}.Key", _key_columns(schema), base
            )
            row_schema, row_spec, row_writer = _AvroBuilder().record(
                f"{prefix}.Value", schema.all_columns(), base
            )
        except TypeError as exc:
            raise ChangeEncodingError(str(exc), table=schema.name) from exc
        value_name = row_schema["name"]
        value_schema = {
            "type": "record",
            "name": f"{prefix}.Envelope",
            "doc": f"A change of a row of Cassandra table {schema.name} (Debezium envelope)",
            "fields": [
                {"name": "before", "type": ["null", row_schema], "default": None},
                {"name": "after", "type": ["null", value_name], "default": None},
                {"name": "op", "type": "string"},
                {"name": "source", "type": _SOURCE_RECORD},
                {"name": "ts_ms", "type": "long"},
            ],
        }
        key_schema["doc"] = f"Primary key of a row of Cassandra table {schema.name}"
        try:  # fastavro checks what we generated (names, defaults) once per table schema version
            parse_schema(key_schema)
            parse_schema(value_schema)
        except Exception as exc:  # fastavro raises SchemaParseException, ValueError...
            raise ChangeEncodingError(
                f"generated Avro schema does not parse: {exc}", table=schema.name
            ) from exc
        return _AvroTable(
            name=schema.name,
            key_subject=f"{topic}-key",
            value_subject=f"{topic}-value",
            key_schema=key_schema,
            value_schema=value_schema,
            key_json=json.dumps(key_schema, separators=(",", ":"), ensure_ascii=False),
            value_json=json.dumps(value_schema, separators=(",", ":"), ensure_ascii=False),
            key_spec=key_spec,
            row_spec=row_spec,
            key_writer=key_writer,
            row_writer=row_writer,
            value_name=value_name,
        )

    def key_schema(self, schema: TableSchema) -> dict[str, Any]:
        """The Avro key schema registered for a table (a record named ``...<table>.Key``)."""
        return self._table(schema).key_schema

    def value_schema(self, schema: TableSchema) -> dict[str, Any]:
        """The Avro value schema registered for a table (the ``...<table>.Envelope`` record)."""
        return self._table(schema).value_schema

    def subjects(self, schema: TableSchema) -> tuple[str, str]:
        """The registry subjects (key, value) of a table."""
        table = self._table(schema)
        return table.key_subject, table.value_subject

    def register(self, schema: TableSchema) -> tuple[int, int]:
        """Register the key and value schemas (cached; blocking): their registry ids."""
        table = self._table(schema)
        if table.key_header is None or table.value_header is None:
            key_id = self.registry.register(table.key_subject, table.key_json)
            value_id = self.registry.register(table.value_subject, table.value_json)
            table.key_header = _FRAME.pack(_MAGIC, key_id)
            table.value_header = _FRAME.pack(_MAGIC, value_id)
        return _FRAME.unpack(table.key_header)[1], _FRAME.unpack(table.value_header)[1]

    async def prepare(self, schema: TableSchema) -> None:
        """Register a table's schemas in a worker thread, so later encodes never block the event loop."""
        table = self._table(schema)
        if table.key_header is None or table.value_header is None:
            await asyncio.to_thread(self.register, schema)

    # -- encoding

    def key_record(self, schema: TableSchema, key: dict[str, Any]) -> dict[str, Any]:
        """The record written for a key (Avro field names, primitive values, tuple-notation unions)."""
        return _convert_row(self._table(schema).key_spec, key, schema.name)

    def value_record(self, schema: TableSchema, envelope: dict[str, Any]) -> dict[str, Any]:
        """The record written for an envelope (Avro field names, primitive values, tuple-notation unions)."""
        return self._value_record(self._table(schema), envelope)

    def _value_record(self, table: _AvroTable, envelope: dict[str, Any]) -> dict[str, Any]:
        op = envelope["op"]
        if op not in OPS:
            raise ChangeEncodingError(f"unknown op {op!r}", table=table.name)
        before = envelope["before"]
        after = envelope["after"]
        spec = table.row_spec
        name = table.value_name
        return {
            "before": None if before is None else (name, _convert_row(spec, before, table.name)),
            "after": None if after is None else (name, _convert_row(spec, after, table.name)),
            "op": op,
            "source": envelope["source"],
            "ts_ms": envelope["ts_ms"],
        }

    def encode_key(self, schema: TableSchema, key: dict[str, Any]) -> bytes:
        table = self._table(schema)
        header = table.key_header
        if header is None:
            self.register(schema)
            header = table.key_header
            assert header is not None
        out = bytearray(header)
        _write_row(table.key_writer, key, table.name, out)
        return bytes(out)

    def encode_change(
        self, schema: TableSchema, change: RowChange, source: ChangeSource, ts_ms: int
    ) -> tuple[bytes, bytes]:
        return encode_change_via_envelope(self, schema, change, source, ts_ms)

    def encode_value(self, schema: TableSchema, envelope: dict[str, Any]) -> bytes:
        table = self._table(schema)
        header = table.value_header
        if header is None:
            self.register(schema)
            header = table.value_header
            assert header is not None
        op = envelope["op"]
        if op not in OPS:
            raise ChangeEncodingError(f"unknown op {op!r}", table=table.name)
        out = bytearray(header)
        for image in (envelope["before"], envelope["after"]):
            if image is None:
                out.append(0)
            else:
                out.append(2)
                _write_row(table.row_writer, image, table.name, out)
        _write_string(out, op)
        try:
            _write_source(out, envelope["source"])
            _write_long(out, envelope["ts_ms"])
        except (KeyError, TypeError, ValueError, AttributeError, struct.error) as exc:
            raise ChangeEncodingError(f"bad envelope source or ts_ms: {exc!r}", table=table.name) from exc
        return bytes(out)

    # -- decoding

    def decode_key(self, data: bytes) -> dict[str, Any]:
        return self._decode(data, "key")

    def decode_value(self, data: bytes) -> dict[str, Any]:
        return self._decode(data, "value")

    def _decode(self, data: bytes, what: str) -> dict[str, Any]:
        if len(data) < 5 or data[0] != _MAGIC:
            raise ChangeDecodingError(
                f"change-event {what} is not in the Confluent wire format: {data[:16]!r}"
            )
        schema_id = _FRAME.unpack_from(data)[1]
        reader = self._readers.get(schema_id)
        if reader is None:
            writer_schema = self.registry.get(schema_id)
            try:
                parsed = parse_schema(_strip_logical_types(writer_schema))
            except Exception as exc:
                raise ChangeDecodingError(f"schema id {schema_id} does not parse: {exc}") from exc
            reader = self._readers[schema_id] = _AvroReader(parsed, _renamer(writer_schema, "", {}))
        try:
            record = schemaless_reader(io.BytesIO(data[5:]), reader.schema, None)
        except Exception as exc:  # fastavro raises EOFError, ValueError, UnicodeDecodeError...
            raise ChangeDecodingError(
                f"change-event {what} does not decode with schema id {schema_id}: {exc}"
            ) from exc
        if not isinstance(record, dict):
            raise ChangeDecodingError(f"change-event {what} with schema id {schema_id} is not a record")
        return record if reader.rename is None else reader.rename(record)
