"""Random values of every CQL type, chosen so that the driver's CQL literal for each round-trips exactly.

Statements use the driver's ``%s`` placeholders (simple statements), so the driver renders every
parameter as a CQL literal. Its default rendering is wrong for two types, and those values use other
classes: `Udt` for a UDT (a dict renders as a map literal, which Cassandra refuses for a UDT column) and
`cassandra.query.ValueSequence` for a tuple (a Python tuple renders as a list). The other values are
chosen so that the literal round-trips exactly, because the driver writes a decimal through ``float`` and
a datetime as epoch milliseconds: timestamps have millisecond precision, decimals at most 15 significant
digits, floats are exact in 32 bits. NaN is never written: NaN != NaN would fail any equality check of a
converged state.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import random
import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from cassandra.encoder import Encoder
from cassandra.query import ValueSequence
from cassandra.util import Duration, Time

WORDS = ("red", "green", "blue", "cyan", "magenta", "yellow", "black", "white")
MAP_KEYS = tuple("abcdefgh")
CITIES = ("Oslo", "Lyon", "Kyoto", "Quito", "Perth", "São Paulo", "O'Fallon")

_ENCODER = Encoder()
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


@dataclass(slots=True, frozen=True)
class Udt:
    """A user-defined type value. The driver renders unknown objects with str(), so this renders the UDT
    literal ``{field: value, ...}`` itself; a field absent from ``values`` is left unset (null)."""

    values: tuple[tuple[str, Any], ...]

    def __str__(self) -> str:
        encode = _ENCODER.cql_encode_all_types
        return "{" + ", ".join(f"{name}: {encode(value)}" for name, value in self.values) + "}"

    def as_dict(self) -> dict[str, Any]:
        return dict(self.values)


Gen = Callable[[random.Random], Any]


def integer(bits: int) -> Gen:
    low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1

    def gen(rng: random.Random) -> int:
        r = rng.random()
        if r < 0.1:
            return rng.choice((low, high, 0, -1))
        if r < 0.5:
            return rng.randint(max(low, -1000), min(high, 1000))
        return rng.randint(low, high)

    return gen


def varint(rng: random.Random) -> int:
    return rng.randint(-(1 << 130), 1 << 130) if rng.random() < 0.7 else rng.randint(-300, 300)


def float32(rng: random.Random) -> float:
    r = rng.random()
    if r < 0.03:
        return rng.choice((-0.0, float("inf"), float("-inf"), 3.4028234663852886e38, 1.401298464324817e-45))
    value = rng.uniform(-1e6, 1e6) if r < 0.7 else rng.uniform(-1, 1) * 10.0 ** rng.randint(-30, 30)
    return struct.unpack("<f", struct.pack("<f", value))[0]


def float32_plain(rng: random.Random) -> float:
    return struct.unpack("<f", struct.pack("<f", rng.uniform(-100, 100)))[0]


def double(rng: random.Random) -> float:
    r = rng.random()
    if r < 0.03:
        return rng.choice((-0.0, float("inf"), float("-inf"), 1.7976931348623157e308, 5e-324))
    if r < 0.6:
        return rng.uniform(-1e9, 1e9)
    return rng.uniform(-1, 1) * 10.0 ** rng.randint(-300, 300)


def plain_double(rng: random.Random) -> float:
    return round(rng.uniform(-180, 180), 6)


def exact_decimal(rng: random.Random) -> Decimal:
    digits = rng.randint(1, 15)
    value = Decimal(rng.randint(-(10**digits - 1), 10**digits - 1)).scaleb(-rng.randint(0, 10))
    return Decimal(repr(float(value)))  # exactly the literal the driver will send


def text(rng: random.Random, alphabet: str = "abcxyz XYZ'\"%{}\\é日本🙂\n", longest: int = 12) -> str:
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, longest)))


def ascii_text(rng: random.Random) -> str:
    return "".join(chr(rng.randint(32, 126)) for _ in range(rng.randint(0, 12)))


def blob(rng: random.Random) -> bytes:
    return rng.randbytes(rng.randint(0, 16))


def boolean(rng: random.Random) -> bool:
    return rng.random() < 0.5


def date(rng: random.Random) -> dt.date:
    return dt.date.fromordinal(
        rng.randint(dt.date(1900, 1, 1).toordinal(), dt.date(2200, 12, 31).toordinal())
    )


def timestamp(rng: random.Random) -> dt.datetime:
    return _EPOCH + dt.timedelta(milliseconds=rng.randint(-2_208_988_800_000, 7_258_118_400_000))


def time_of_day(rng: random.Random) -> Time:
    return Time(rng.randrange(86_400 * 10**9))


def duration(rng: random.Random) -> Duration:
    sign = rng.choice((1, -1))  # Cassandra refuses a duration whose parts have different signs
    return Duration(sign * rng.randint(0, 120), sign * rng.randint(0, 60), sign * rng.randint(0, 10**14))


def inet(rng: random.Random) -> str:
    if rng.random() < 0.5:
        return str(ipaddress.IPv4Address(rng.getrandbits(32)))
    return str(ipaddress.IPv6Address(rng.getrandbits(128)))


def timeuuid(rng: random.Random) -> uuid.UUID:
    return uuid.UUID(int=rng.getrandbits(128), version=1)


def uuid_v4(rng: random.Random) -> uuid.UUID:
    return uuid.UUID(int=rng.getrandbits(128), version=4)


def int_text_bool_tuple(rng: random.Random) -> ValueSequence:
    first = None if rng.random() < 0.2 else integer(32)(rng)
    return ValueSequence([first, text(rng), boolean(rng)])


def int_list(rng: random.Random) -> list[int]:
    return [rng.randint(0, 20) for _ in range(rng.randint(0, 4))]


def map_of_sets(rng: random.Random) -> dict[str, set[int]]:
    return {k: set(rng.sample(range(50), rng.randint(0, 3))) for k in rng.sample(MAP_KEYS, rng.randint(0, 3))}


def float_vector(rng: random.Random) -> list[float]:
    return [float32_plain(rng) for _ in range(3)]


def word_set(rng: random.Random) -> set[str]:
    return set(rng.sample(WORDS, rng.randint(0, 3)))


def text_int_map(rng: random.Random) -> dict[str, int]:
    return {k: rng.randint(-99, 99) for k in rng.sample(MAP_KEYS, rng.randint(0, 3))}


def int_text_map(rng: random.Random) -> dict[int, str]:
    return {k: text(rng, "abc", 4) for k in rng.sample(range(10), rng.randint(0, 3))}


def point(rng: random.Random) -> Udt:
    return Udt((("x", plain_double(rng)), ("y", plain_double(rng))))


def address(rng: random.Random) -> Udt:
    phones = tuple(f"+47 {rng.randint(10_000_000, 99_999_999)}" for _ in range(rng.randint(0, 2)))
    return Udt(
        (
            ("street", text(rng)),
            ("city", rng.choice(CITIES)),
            ("zip", rng.randint(1000, 9999)),
            ("phones", phones if rng.random() < 0.8 else None),
        )
    )
