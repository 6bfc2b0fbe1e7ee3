"""The change-event codec interface: the Kafka key and value bytes of a change event, and their errors.

A codec takes the key dict of ``change_key`` and the envelope of ``change_envelope`` (Python values as
``state.decode_row`` gives them) and compiles, once per TableSchema object, one converter (JSON) or one
writer (Avro) per column, so encoding a row is one call per column that needs work. ``encode_change``
gives both bytes of one change; the JSON codec makes them straight from the row images' cell bytes
(``schemas.json_row_form``), the same bytes with one step less per value. The codecs are
``schemas.change_json.JsonChangeCodec`` and ``schemas.change_avro.AvroChangeCodec``.

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

Dates are days and timestamps milliseconds (not ISO strings) in JSON too: CQL dates and timestamps reach
millions of years either side of 1970, beyond Python's date and plain four-digit-year ISO 8601 strings.
(Python consumers reading the Avro bytes with fastavro's logical types hit the same wall: fastavro raises
on dates and timestamps outside years 1..9999. This codec's own decoder does not.)
"""

from __future__ import annotations

from typing import Any, Protocol

from cassandra_model.table_schema import TableSchema
from schemas.change_event import ChangeEventError, ChangeSource, change_envelope, envelope_key
from state.change import RowChange


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
