"""Serialized values of the native types (native protocol v4+) to their Python values.

Each decoder takes the whole, non-empty value and raises on bytes that do not fit (the type's ``decode``
turns that into ValueDecodeError). Out-of-range dates and timestamps stay ints rather than failing:
Cassandra's range is wider than Python's.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import ipaddress
import struct
import uuid

from cassandra_model.cql_types.framing import read_signed_vint
from cassandra_model.cql_types.values import CounterShard, CqlTime, Duration

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_F32 = struct.Struct(">f")
_F64 = struct.Struct(">d")

_EPOCH_DT = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
_EPOCH_ORDINAL = _dt.date(1970, 1, 1).toordinal()
_NANOS_PER_DAY = 86_400 * 1_000_000_000
_DECIMAL_CONTEXT = decimal.Context(prec=decimal.MAX_PREC, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)


def exact(data: bytes, size: int, name: str) -> None:
    """Raise unless ``data`` is ``size`` bytes long."""
    if len(data) != size:
        raise ValueError(f"{name} needs {size} bytes, got {len(data)}")


def decode_ascii(b: bytes) -> str:
    return b.decode("ascii")


def decode_text(b: bytes) -> str:
    return b.decode("utf-8")


def decode_blob(b: bytes) -> bytes:
    return b


def decode_boolean(b: bytes) -> bool:
    exact(b, 1, "boolean")
    return b[0] != 0


def decode_tinyint(b: bytes) -> int:
    exact(b, 1, "tinyint")
    return b[0] - 256 if b[0] > 127 else b[0]


def decode_smallint(b: bytes) -> int:
    return _I16.unpack(b)[0]


def decode_int(b: bytes) -> int:
    return _I32.unpack(b)[0]


def decode_bigint(b: bytes) -> int:
    return _I64.unpack(b)[0]


def decode_varint(b: bytes) -> int:
    return int.from_bytes(b, "big", signed=True)


def decode_float(b: bytes) -> float:
    return _F32.unpack(b)[0]


def decode_double(b: bytes) -> float:
    return _F64.unpack(b)[0]


def decode_decimal(b: bytes) -> decimal.Decimal:
    if len(b) < 5:
        raise ValueError(f"decimal needs at least 5 bytes, got {len(b)}")
    scale = _I32.unpack_from(b)[0]
    unscaled = int.from_bytes(b[4:], "big", signed=True)
    return decimal.Decimal(unscaled).scaleb(-scale, _DECIMAL_CONTEXT)


def decode_date(b: bytes) -> _dt.date | int:
    days = _U32.unpack(b)[0] - 2**31
    try:
        return _dt.date.fromordinal(_EPOCH_ORDINAL + days)
    except (ValueError, OverflowError):
        return days


def decode_time(b: bytes) -> CqlTime:
    nanos = _I64.unpack(b)[0]
    if not 0 <= nanos < _NANOS_PER_DAY:
        raise ValueError(f"time {nanos} ns is outside one day")
    return CqlTime(nanos)


def decode_timestamp(b: bytes) -> _dt.datetime | int:
    millis = _I64.unpack(b)[0]
    try:
        return _EPOCH_DT + _dt.timedelta(milliseconds=millis)
    except OverflowError:
        return millis


def decode_uuid(b: bytes) -> uuid.UUID:
    return uuid.UUID(bytes=b)


def decode_inet(b: bytes) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    if len(b) not in (4, 16):
        raise ValueError(f"inet needs 4 or 16 bytes, got {len(b)}")
    return ipaddress.ip_address(b)


def decode_duration(b: bytes) -> Duration:
    months, pos = read_signed_vint(b, 0)
    days, pos = read_signed_vint(b, pos)
    nanos, pos = read_signed_vint(b, pos)
    if pos != len(b):
        raise ValueError("trailing bytes after duration")
    return Duration(months, days, nanos)


def counter_shards(b: bytes) -> list[CounterShard]:
    """The shards of a serialized CounterContext (§7.13): int16 header count, header, 32-byte shards."""
    if len(b) < 2:
        raise ValueError("counter context shorter than its header")
    start = 2 + 2 * abs(_I16.unpack_from(b)[0])
    if start > len(b) or (len(b) - start) % 32:
        raise ValueError(f"{len(b)} bytes are not a counter context")
    shards = []
    for pos in range(start, len(b), 32):
        clock, count = struct.unpack_from(">qq", b, pos + 16)
        shards.append(CounterShard(uuid.UUID(bytes=b[pos : pos + 16]), clock, count))
    return shards


def decode_counter(b: bytes) -> int:
    """A counter cell's value: the sum of its shard counts (a plain 8-byte bigint is accepted too)."""
    start = 2 + 2 * abs(_I16.unpack_from(b)[0]) if len(b) >= 2 else 1
    if len(b) == 8 and (start > 8 or (8 - start) % 32):
        return _I64.unpack(b)[0]
    total = sum(shard.count for shard in counter_shards(b))
    return ((total + 2**63) % 2**64) - 2**63


def decode_empty(b: bytes) -> None:
    if b:
        raise ValueError("EmptyType holds no bytes")
    return None
