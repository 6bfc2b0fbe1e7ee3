"""Change events of the other encodings, decoded, in the JSON encoding's form: what readers that know one
form (the lake job parses the JSON form with Spark's JSON reader) need from Avro and Kafka Connect JSON.

``decode_key``/``decode_value`` of ``AvroChangeCodec`` and ``ConnectJsonChangeCodec`` give rows in their
own forms (``schemas.change_codec``); the JSON form differs in a few kinds of value only:

=============================  =========================================  ====================================
CQL                            Avro (decoded)                             Kafka Connect JSON payload
=============================  =========================================  ====================================
decimal                        record {unscaled, scale}                   the JSON form already
blob, custom                   bytes                                      the JSON form already (base64)
float, double: NaN, infinity   the float                                  the JSON form already (a string)
map<non-text K, V>             array of records {key, value}              an object when K is a Connect
                                                                          string (uuid, inet, varint,
                                                                          decimal), else the JSON form
tuple                          record {f0, f1, ...}                       object {f0, f1, ...}
=============================  =========================================  ====================================

Everything else (numbers, strings, dates as days, timestamps as milliseconds, UDTs by field name,
durations) is the same, at every depth. Rows are converted by the columns of a table schema, so a record
written under an older schema version reads as the JSON encoding would have written it then: a column
the record does not have is null, one the schema no longer has is left out.
"""

from __future__ import annotations

import binascii
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
)
from cassandra_model.table_schema import TableSchema
from schemas.change_avro_reader import avro_decimal
from schemas.change_connect_json import keyed_by_connect_strings
from schemas.change_conversions import Converter, key_columns, map_items
from schemas.change_json import KEY_JSON, VALUE_JSON


def _base64(v: bytes) -> str:
    return binascii.b2a_base64(v, newline=False).decode("ascii")


def _float(v: float) -> float | str:
    if v - v == 0:  # finite
        return v
    return "NaN" if v != v else ("Infinity" if v > 0 else "-Infinity")


def _decimal(v: Any) -> str:
    return v if isinstance(v, str) else str(avro_decimal(v))


def _fields(fields: list[tuple[str, Converter | None]], v: dict[str, Any]) -> dict[str, Any]:
    """A record's fields in the JSON form, each by its converter (a null, or no converter: as it is)."""
    get = v.get
    return {n: x if (x := get(n)) is None or c is None else c(x) for n, c in fields}


class _JsonForm(CqlTypeVisitor[Converter | None]):
    """The JSON form of one non-null value of another encoding (None: it is the JSON form already). The
    rules for collections, tuples and UDTs are shared; each encoding says how its leaves and maps differ."""

    __slots__ = ()

    def convert(self, t: CqlType) -> Converter | None:
        return t.accept(self)

    def visit_list(self, t: ListType | SetType | VectorType, *args: Any) -> Converter | None:
        element = self.convert(t.element)
        return None if element is None else (lambda v: [None if x is None else element(x) for x in v])

    visit_set = visit_list
    visit_vector = visit_list

    def _text_keyed_map(self, t: MapType) -> Converter | None:
        """A map whose keys are text: an object in every form, its values converted."""
        vc = self.convert(t.value)
        return None if vc is None else (lambda v: {k: None if x is None else vc(x) for k, x in v.items()})

    def visit_tuple(self, t: TupleType, *args: Any) -> Converter | None:
        fields = [(f"f{i}", self.convert(e)) for i, e in enumerate(t.elements)]
        return lambda v: [x if (x := v.get(n)) is None or c is None else c(x) for n, c in fields]

    def visit_user_type(self, t: UserType, *args: Any) -> Converter | None:
        fields = [(n, self.convert(ft)) for n, ft in zip(t.field_names, t.field_types, strict=True)]
        return lambda v: _fields(fields, v)


class _FromAvro(_JsonForm):
    """Values decoded from Avro."""

    __slots__ = ()

    def visit_native(self, t: NativeType, *args: Any) -> Converter | None:
        if t.name == "decimal":
            return _decimal
        if t.name == "blob":
            return _base64
        if t.name in ("float", "double"):
            return _float
        return None

    def visit_custom(self, t: CustomType, *args: Any) -> Converter | None:
        return _base64

    def visit_map(self, t: MapType, *args: Any) -> Converter | None:
        if t.key.is_text:
            return self._text_keyed_map(t)
        kc, vc = self.convert(t.key), self.convert(t.value)
        return lambda v: [
            [e["key"] if kc is None else kc(e["key"]), e["value"] if vc is None else vc(e["value"])]
            for e in v
        ]


class _FromConnect(_JsonForm):
    """Values of a Kafka Connect JSON payload."""

    __slots__ = ()

    def visit_native(self, t: NativeType, *args: Any) -> Converter | None:
        return None

    def visit_custom(self, t: CustomType, *args: Any) -> Converter | None:
        return None

    def visit_map(self, t: MapType, *args: Any) -> Converter | None:
        if t.key.is_text:
            return self._text_keyed_map(t)
        kc, vc = self.convert(t.key), self.convert(t.value)
        if keyed_by_connect_strings(t):  # an object whose keys are the JSON form's key strings
            return lambda v: [[k, x if x is None or vc is None else vc(x)] for k, x in v.items()]
        if kc is None and vc is None:
            return None
        return lambda v: [
            [k if k is None or kc is None else kc(k), x if x is None or vc is None else vc(x)]
            for k, x in map_items(v)
        ]


_CONVERTERS: dict[str, _JsonForm] = {"avro": _FromAvro(), "json_schema": _FromConnect()}


class JsonFormRows:
    """Rows (keys, images) of one table, decoded from ``encoding``, in the JSON encoding's form."""

    __slots__ = ("_columns", "_key_columns")

    def __init__(self, schema: TableSchema, encoding: str) -> None:
        converters = _CONVERTERS.get(encoding)
        convert = (lambda t: None) if converters is None else converters.convert
        self._columns = [(c.name, convert(c.type)) for c in schema.all_columns()]
        self._key_columns = [(c.name, convert(c.type)) for c in key_columns(schema)]

    def key(self, key: dict[str, Any]) -> dict[str, Any]:
        return _fields(self._key_columns, key)

    def image(self, row: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if row is None else _fields(self._columns, row)

    def key_text(self, key: dict[str, Any]) -> str:
        """The key as the JSON encoding writes it (so a lake's ``_cdc_key`` is the same whatever the
        clean topics' encoding)."""
        return KEY_JSON.encode(self.key(key))

    def envelope_text(self, envelope: dict[str, Any]) -> str:
        """The envelope's ``after``, ``op``, ``source`` and ``ts_ms`` as JSON-encoding text (``before``,
        which the lake does not read, left out)."""
        return VALUE_JSON.encode(
            {
                "after": self.image(envelope.get("after")),
                "op": envelope.get("op"),
                "source": envelope.get("source"),
                "ts_ms": envelope.get("ts_ms"),
            }
        )
