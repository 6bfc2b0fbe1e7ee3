"""Everything that differs between the native types, one row per type: adding a native type is adding
its row here (and its decoder and byte order in ``native_decoders`` and ``byte_order``; when equal values
can differ in bytes, its canonical form in ``canonical_forms``).

A row holds the commit-log facts (fixed length, whether an empty value is a value), the decoder, the
byte-comparable order, the canonical form of values that compare equal with different bytes, the
conversion of values as cassandra-driver returns them into values as the decoder gives them, and
Cassandra's marshal class (which names the type in quoted custom types and picks cassandra-driver's
serializer, see ``cassandra_model.value_serializer``).
"""

from __future__ import annotations

import datetime as _dt
import ipaddress
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from cassandra_model.cql_types import byte_order as order
from cassandra_model.cql_types import canonical_forms as canon
from cassandra_model.cql_types import native_decoders as dec
from cassandra_model.cql_types.values import CqlTime, Duration

Convert = Callable[[Any], Any]
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class NativeKind:
    """One native type. ``fixed_length``: commit-log value length when written without a length prefix
    (None: variable); ``empty_ok``: an empty value is a value (else it decodes to None);
    ``canonical``: the one form of values that compare equal (``canonical_forms``), None when equal
    values have equal bytes (``byte_identical``); ``marshal_class``: Cassandra's AbstractType
    class; ``from_driver``: cassandra-driver's value to the decoder's (None: it is the same);
    ``is_text``: values are strings."""

    name: str
    fixed_length: int | None
    empty_ok: bool
    decode: Callable[[bytes], Any]
    order: order.ValueEncoder
    canonical: canon.CanonicalForm | None
    marshal_class: str
    from_driver: Convert | None = None
    is_text: bool = False

    @property
    def byte_identical(self) -> bool:
        return self.canonical is None


# -- cassandra-driver values to the decoder's


def _date_from_driver(v: Any) -> Any:
    return v.date() if hasattr(v, "date") else v


def _time_from_driver(v: Any) -> CqlTime:
    return CqlTime(int(getattr(v, "nanosecond_time", v)))


def _duration_from_driver(v: Any) -> Duration:
    return Duration(v.months, v.days, v.nanoseconds)


def _timestamp_from_driver(v: Any) -> Any:
    if isinstance(v, _dt.datetime) and v.tzinfo is None:
        return v.replace(tzinfo=_dt.UTC)
    return v


_K = NativeKind
_SIGNED = order.signed_fixed
_UNSIGNED = order.unsigned_fixed
_BYTES = order.unsigned_bytes
_FLOAT = order.floating
_CANON_F4 = canon.floating(4)
_CANON_F8 = canon.floating(8)

# fmt: off
NATIVE_KINDS: dict[str, NativeKind] = {
    k.name: k
    for k in (
        #  name         fixed empty  decode                order                    canonical      marshal class
        _K("ascii",     None, True,  dec.decode_ascii,     _BYTES,                  None,          "AsciiType",
           is_text=True),
        _K("text",      None, True,  dec.decode_text,      _BYTES,                  None,          "UTF8Type",
           is_text=True),
        _K("blob",      None, True,  dec.decode_blob,      _BYTES,                  None,          "BytesType"),
        _K("boolean",   1,    False, dec.decode_boolean,   order.boolean,           canon.boolean, "BooleanType"),
        _K("tinyint",   None, False, dec.decode_tinyint,   _SIGNED(1, "tinyint"),   None,          "ByteType"),
        _K("smallint",  None, False, dec.decode_smallint,  _SIGNED(2, "smallint"),  None,          "ShortType"),
        _K("int",       4,    False, dec.decode_int,       _SIGNED(4, "int"),       None,          "Int32Type"),
        _K("bigint",    8,    False, dec.decode_bigint,    _SIGNED(8, "bigint"),    None,          "LongType"),
        _K("varint",    None, False, dec.decode_varint,    order.varint,            canon.varint,  "IntegerType"),
        _K("float",     4,    False, dec.decode_float,     _FLOAT(4, "float"),      _CANON_F4,     "FloatType"),
        _K("double",    8,    False, dec.decode_double,    _FLOAT(8, "double"),     _CANON_F8,     "DoubleType"),
        _K("decimal",   None, False, dec.decode_decimal,   order.decimal_value,     canon.decimal, "DecimalType"),
        _K("date",      None, False, dec.decode_date,      _UNSIGNED(4, "date"),    None,          "SimpleDateType",
           from_driver=_date_from_driver),
        _K("time",      None, False, dec.decode_time,      _UNSIGNED(8, "time"),    None,          "TimeType",
           from_driver=_time_from_driver),
        _K("timestamp", 8,    False, dec.decode_timestamp, _SIGNED(8, "timestamp"), None,          "TimestampType",
           from_driver=_timestamp_from_driver),
        _K("uuid",      16,   False, dec.decode_uuid,      order.uuid_value,        None,          "UUIDType"),
        _K("timeuuid",  16,   False, dec.decode_uuid,      order.timeuuid,          None,          "TimeUUIDType"),
        _K("inet",      None, False, dec.decode_inet,      _BYTES,                  None,          "InetAddressType",
           from_driver=ipaddress.ip_address),
        _K("duration",  None, False, dec.decode_duration,  _BYTES,                  None,          "DurationType",
           from_driver=_duration_from_driver),
        _K("counter",   None, False, dec.decode_counter,   _SIGNED(8, "counter"),   None,
           "CounterColumnType"),
        _K("empty",     0,    True,  dec.decode_empty,     _BYTES,                  None,          "EmptyType"),
    )
}
# fmt: on

#: other spellings of a native type
NATIVE_ALIASES = {"varchar": "text"}

#: Java marshal class short names (as they appear in quoted custom types) with a native equivalent
MARSHAL_NATIVES = {kind.marshal_class: kind.name for kind in NATIVE_KINDS.values()}
MARSHAL_NATIVES.update({"DateType": "timestamp", "LexicalUUIDType": "uuid"})  # older classes, same values


def every_native(table: Mapping[str, T], concern: str) -> Mapping[str, T]:
    """``table`` (native type name -> what one concern does with it), checked to cover every native type:
    an upper layer's table fails when its module loads, not when a column of a new type first shows up."""
    missing = sorted(set(NATIVE_KINDS) - set(table))
    if missing:
        raise LookupError(f"{concern}: nothing for the native type(s) {', '.join(missing)}")
    return table
