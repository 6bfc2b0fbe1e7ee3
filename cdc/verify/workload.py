"""The seeded, randomized CQL workload `cdc verify` drives through several concurrent clients.

Pure and deterministic: the same keyspace, seed, base time and operation count give the same statements,
so a failing run can be replayed. It aims at what a CDC pipeline gets wrong: every CQL type and mutation
kind, cells written twice at one timestamp (Cassandra breaks the tie by the greater value bytes, and a
tombstone or expiring cell beats a live one), writes older than what they overlap (they must lose), TTLs
that run out while the pipeline watches, range tombstones with inclusive and exclusive bounds over an ASC
and a DESC clustering column, static and complex (collection, UDT) columns, batches, LWT, counters, and a
column added and another dropped between phases.

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
import re
import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from cassandra.encoder import Encoder
from cassandra.query import ValueSequence
from cassandra.util import Duration, Time

KINDS: tuple[str, ...] = (
    "insert",
    "insert_ttl",
    "update",
    "update_ttl",
    "update_static",
    "list_append",
    "list_prepend",
    "list_remove",
    "set_add",
    "set_remove",
    "map_put",
    "map_remove",
    "collection_overwrite",
    "udt_field",
    "delete_cells",
    "delete_row",
    "delete_range",
    "delete_partition",
    "batch",
    "lwt_insert",
    "lwt_update",
    "counter",
)

# How often a new operation draws each kind; insert and update become insert_ttl/update_ttl at TTL_RATE.
_WEIGHTS: dict[str, int] = {
    "insert": 12,
    "update": 12,
    "update_static": 4,
    "list_append": 3,
    "list_prepend": 2,
    "list_remove": 2,
    "set_add": 3,
    "set_remove": 2,
    "map_put": 4,
    "map_remove": 3,
    "collection_overwrite": 3,
    "udt_field": 3,
    "delete_cells": 5,
    "delete_row": 4,
    "delete_range": 5,
    "delete_partition": 2,
    "batch": 5,
    "lwt_insert": 2,
    "lwt_update": 2,
    "counter": 4,
}
# Statements a batch is made of (no LWT, no counters: neither may share a logged batch with the others).
_BATCH_KINDS = (
    "insert",
    "update",
    "update_static",
    "list_append",
    "set_add",
    "map_put",
    "map_remove",
    "collection_overwrite",
    "udt_field",
    "delete_cells",
    "delete_row",
    "delete_range",
    "delete_partition",
)

OUT_OF_ORDER_RATE = 0.10  # of operations with USING TIMESTAMP: an older timestamp than the op index's
COLLISION_RATE = 0.05  # of all operations: the exact timestamp of an earlier write to the same cells
TTL_RATE = 0.10  # of writes that may carry a TTL
NULL_RATE = 0.10  # of values in INSERT/UPDATE: null, which writes a tombstone

# Few partitions and rows, so writes, deletes and late writes keep landing on the same cells.
KV_IDS = 50
LWT_IDS = range(44, 50)  # LWT writes get the Paxos (wall-clock) timestamp, newer than every USING TIMESTAMP
TENANTS = tuple(f"t{i}" for i in range(6))
BUCKETS = 5
CK1 = 6
CK2 = ("a", "b", "c", "d", "e")
TYPED_IDS = 30
PAGES = 20
DAYS = (dt.date(2024, 2, 28), dt.date(2024, 2, 29), dt.date(2024, 3, 1))
WORDS = ("red", "green", "blue", "cyan", "magenta", "yellow", "black", "white")
MAP_KEYS = tuple("abcdefgh")
CITIES = ("Oslo", "Lyon", "Kyoto", "Quito", "Perth", "São Paulo", "O'Fallon")

ADDED_COLUMN = ("extra", "int")  # ALTER TABLE kv ADD after the first phase
DROPPED_COLUMN = "note"  # ALTER TABLE kv DROP after the second phase

_ENCODER = Encoder()
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_KEYSPACE = re.compile(r"[a-z][a-z0-9_]{0,47}")


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


@dataclass(slots=True, frozen=True)
class Operation:
    """One client request. ``timestamp`` is the USING TIMESTAMP it carries (µs), None when Cassandra picks
    it (LWT, counters). A batch names its tables joined by ',' and the partition of its first statement."""

    kind: str
    table: str
    cql: str
    params: tuple[Any, ...]
    timestamp: int | None
    partition: tuple[Any, ...]
    ttl: int | None = None  # the longest USING TTL in the statement, if any


@dataclass(slots=True, frozen=True)
class Phase:
    """Operations the clients run concurrently, then schema changes made while every client is paused."""

    operations: list[Operation]
    schema_change_after: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------------------
# values


Gen = Callable[[random.Random], Any]


def _integer(bits: int) -> Gen:
    low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1

    def gen(rng: random.Random) -> int:
        r = rng.random()
        if r < 0.1:
            return rng.choice((low, high, 0, -1))
        if r < 0.5:
            return rng.randint(max(low, -1000), min(high, 1000))
        return rng.randint(low, high)

    return gen


def _varint(rng: random.Random) -> int:
    return rng.randint(-(1 << 130), 1 << 130) if rng.random() < 0.7 else rng.randint(-300, 300)


def _float32(rng: random.Random) -> float:
    r = rng.random()
    if r < 0.03:
        return rng.choice((-0.0, float("inf"), float("-inf"), 3.4028234663852886e38, 1.401298464324817e-45))
    value = rng.uniform(-1e6, 1e6) if r < 0.7 else rng.uniform(-1, 1) * 10.0 ** rng.randint(-30, 30)
    return struct.unpack("<f", struct.pack("<f", value))[0]


def _float32_plain(rng: random.Random) -> float:
    return struct.unpack("<f", struct.pack("<f", rng.uniform(-100, 100)))[0]


def _double(rng: random.Random) -> float:
    r = rng.random()
    if r < 0.03:
        return rng.choice((-0.0, float("inf"), float("-inf"), 1.7976931348623157e308, 5e-324))
    if r < 0.6:
        return rng.uniform(-1e9, 1e9)
    return rng.uniform(-1, 1) * 10.0 ** rng.randint(-300, 300)


def _plain_double(rng: random.Random) -> float:
    return round(rng.uniform(-180, 180), 6)


def _decimal(rng: random.Random) -> Decimal:
    digits = rng.randint(1, 15)
    value = Decimal(rng.randint(-(10**digits - 1), 10**digits - 1)).scaleb(-rng.randint(0, 10))
    return Decimal(repr(float(value)))  # exactly the literal the driver will send


def _text(rng: random.Random, alphabet: str = "abcxyz XYZ'\"%{}\\é日本🙂\n", longest: int = 12) -> str:
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, longest)))


def _ascii(rng: random.Random) -> str:
    return "".join(chr(rng.randint(32, 126)) for _ in range(rng.randint(0, 12)))


def _blob(rng: random.Random) -> bytes:
    return rng.randbytes(rng.randint(0, 16))


def _boolean(rng: random.Random) -> bool:
    return rng.random() < 0.5


def _date(rng: random.Random) -> dt.date:
    return dt.date.fromordinal(
        rng.randint(dt.date(1900, 1, 1).toordinal(), dt.date(2200, 12, 31).toordinal())
    )


def _timestamp(rng: random.Random) -> dt.datetime:
    return _EPOCH + dt.timedelta(milliseconds=rng.randint(-2_208_988_800_000, 7_258_118_400_000))


def _time(rng: random.Random) -> Time:
    return Time(rng.randrange(86_400 * 10**9))


def _duration(rng: random.Random) -> Duration:
    sign = rng.choice((1, -1))  # Cassandra refuses a duration whose parts have different signs
    return Duration(sign * rng.randint(0, 120), sign * rng.randint(0, 60), sign * rng.randint(0, 10**14))


def _inet(rng: random.Random) -> str:
    if rng.random() < 0.5:
        return str(ipaddress.IPv4Address(rng.getrandbits(32)))
    return str(ipaddress.IPv6Address(rng.getrandbits(128)))


def _timeuuid(rng: random.Random) -> uuid.UUID:
    return uuid.UUID(int=rng.getrandbits(128), version=1)


def _uuid(rng: random.Random) -> uuid.UUID:
    return uuid.UUID(int=rng.getrandbits(128), version=4)


def _tuple(rng: random.Random) -> ValueSequence:
    first = None if rng.random() < 0.2 else _integer(32)(rng)
    return ValueSequence([first, _text(rng), _boolean(rng)])


def _int_list(rng: random.Random) -> list[int]:
    return [rng.randint(0, 20) for _ in range(rng.randint(0, 4))]


def _map_of_sets(rng: random.Random) -> dict[str, set[int]]:
    return {k: set(rng.sample(range(50), rng.randint(0, 3))) for k in rng.sample(MAP_KEYS, rng.randint(0, 3))}


def _vector(rng: random.Random) -> list[float]:
    return [_float32_plain(rng) for _ in range(3)]


def _word_set(rng: random.Random) -> set[str]:
    return set(rng.sample(WORDS, rng.randint(0, 3)))


def _text_int_map(rng: random.Random) -> dict[str, int]:
    return {k: rng.randint(-99, 99) for k in rng.sample(MAP_KEYS, rng.randint(0, 3))}


def _int_text_map(rng: random.Random) -> dict[int, str]:
    return {k: _text(rng, "abc", 4) for k in rng.sample(range(10), rng.randint(0, 3))}


def _point(rng: random.Random) -> Udt:
    return Udt((("x", _plain_double(rng)), ("y", _plain_double(rng))))


def _address(rng: random.Random) -> Udt:
    phones = tuple(f"+47 {rng.randint(10_000_000, 99_999_999)}" for _ in range(rng.randint(0, 2)))
    return Udt(
        (
            ("street", _text(rng)),
            ("city", rng.choice(CITIES)),
            ("zip", rng.randint(1000, 9999)),
            ("phones", phones if rng.random() < 0.8 else None),
        )
    )


_ADDRESS_FIELDS: dict[str, Gen] = {
    "street": _text,
    "city": lambda rng: rng.choice(CITIES),
    "zip": lambda rng: rng.randint(1000, 9999),
    "phones": lambda rng: tuple(f"+46 {rng.randint(100_000, 999_999)}" for _ in range(rng.randint(0, 2))),
}

# One column of every CQL type, named after it.
_TYPED: dict[str, tuple[str, Gen]] = {
    "c_ascii": ("ascii", _ascii),
    "c_bigint": ("bigint", _integer(64)),
    "c_blob": ("blob", _blob),
    "c_boolean": ("boolean", _boolean),
    "c_date": ("date", _date),
    "c_decimal": ("decimal", _decimal),
    "c_double": ("double", _double),
    "c_duration": ("duration", _duration),
    "c_float": ("float", _float32),
    "c_inet": ("inet", _inet),
    "c_int": ("int", _integer(32)),
    "c_smallint": ("smallint", _integer(16)),
    "c_text": ("text", _text),
    "c_time": ("time", _time),
    "c_timestamp": ("timestamp", _timestamp),
    "c_timeuuid": ("timeuuid", _timeuuid),
    "c_tinyint": ("tinyint", _integer(8)),
    "c_uuid": ("uuid", _uuid),
    "c_varint": ("varint", _varint),
    "c_tuple": ("tuple<int, text, boolean>", _tuple),
    "c_frozen_list": ("frozen<list<int>>", _int_list),
    "c_map": ("map<text, frozen<set<int>>>", _map_of_sets),
    "c_vector": ("vector<float, 3>", _vector),
}

# Cells that hold one value (simple or frozen), per table: what INSERT/UPDATE set and collisions reuse.
_SIMPLE: dict[str, dict[str, Gen]] = {
    "kv": {"name": _text, "score": _integer(64), "note": _text, "extra": _integer(32), "loc": _point},
    "wide": {"v1": _integer(32), "v2": _text, "s": _text},
    "typed": {name: gen for name, (_type, gen) in _TYPED.items() if name != "c_map"},
}
_STATIC = {"s", "s_tags"}


# ---------------------------------------------------------------------------------------------------------
# statements


@dataclass(slots=True)
class _Write:
    """Single-value cells a statement set, remembered so a later operation can reuse the timestamp."""

    table: str
    partition: tuple[Any, ...]
    key: tuple[tuple[str, Any], ...]
    values: dict[str, Any]
    timestamp: int = 0


@dataclass(slots=True)
class _Stmt:
    """A statement before its USING clause is known: ``head`` + USING ... + ``tail``."""

    kind: str
    table: str
    partition: tuple[Any, ...]
    head: str
    head_params: tuple[Any, ...]
    tail: str = ""
    tail_params: tuple[Any, ...] = ()
    ttl_ok: bool = False
    write: _Write | None = None

    def render(self, timestamp: int | None, ttl: int | None) -> tuple[str, tuple[Any, ...]]:
        parts: list[str] = []
        using: list[Any] = []
        if timestamp is not None:
            parts.append("TIMESTAMP %s")
            using.append(timestamp)
        if ttl is not None:
            parts.append("TTL %s")
            using.append(ttl)
        clause = f" USING {' AND '.join(parts)}" if parts else ""
        return self.head + clause + self.tail, (*self.head_params, *using, *self.tail_params)


def _where(key: tuple[tuple[str, Any], ...]) -> tuple[str, tuple[Any, ...]]:
    return " WHERE " + " AND ".join(f"{name} = %s" for name, _ in key), tuple(v for _, v in key)


def _set_clause(values: dict[str, Any]) -> tuple[str, tuple[Any, ...]]:
    return ", ".join(f"{name} = %s" for name in values), tuple(values.values())


class _Generator:
    """The state one pass over the workload needs: the random stream, the schema as it is at this point
    of the run, and what was written so far (for collisions and LWT conditions)."""

    def __init__(self, workload: Workload) -> None:
        self.ks = workload.keyspace
        self.base = workload.base_time_us
        self.ttl_range = workload.ttl_range_s
        self.rng = random.Random(workload.seed)
        self.typed_ids = [_uuid(self.rng) for _ in range(TYPED_IDS)]
        self.added = False
        self.dropped = False
        self.history: list[_Write] = []
        self.names: dict[int, str] = {}  # last name written to each kv id, for LWT conditions
        self.kinds = list(_WEIGHTS)
        self.weights = list(_WEIGHTS.values())

    # -- helpers

    def q(self, table: str) -> str:
        return f"{self.ks}.{table}"

    def writable(self, table: str, column: str) -> bool:
        if table != "kv":
            return True
        if column == ADDED_COLUMN[0]:
            return self.added
        if column == DROPPED_COLUMN:
            return not self.dropped
        return True

    def simple_columns(self, table: str) -> dict[str, Gen]:
        return {c: g for c, g in _SIMPLE[table].items() if self.writable(table, c)}

    def value(self, gen: Gen) -> Any:
        return None if self.rng.random() < NULL_RATE else gen(self.rng)

    def subset(self, columns: list[str], p: float, at_least: int = 1) -> list[str]:
        chosen = [c for c in columns if self.rng.random() < p]
        return chosen or self.rng.sample(columns, min(at_least, len(columns)))

    def ttl(self) -> int:
        return self.rng.randint(*self.ttl_range)

    def kv_key(self) -> tuple[tuple[str, Any], ...]:
        return (("id", self.rng.randrange(KV_IDS)),)

    def wide_partition(self) -> tuple[tuple[str, Any], ...]:
        return (("tenant", self.rng.choice(TENANTS)), ("bucket", self.rng.randrange(BUCKETS)))

    def wide_row(self) -> tuple[tuple[str, Any], ...]:
        return (*self.wide_partition(), ("ck1", self.rng.randrange(CK1)), ("ck2", self.rng.choice(CK2)))

    def typed_key(self) -> tuple[tuple[str, Any], ...]:
        return (("id", self.rng.choice(self.typed_ids)),)

    @staticmethod
    def partition_of(table: str, key: tuple[tuple[str, Any], ...]) -> tuple[Any, ...]:
        count = 2 if table == "wide" else 1
        return tuple(v for _, v in key[:count])

    def remember(self, table: str, key: tuple[tuple[str, Any], ...], values: dict[str, Any]) -> _Write:
        if table == "kv" and "name" in values and values["name"] is not None:
            self.names[key[0][1]] = values["name"]
        simple = {c: v for c, v in values.items() if c in _SIMPLE[table]}
        return _Write(table, self.partition_of(table, key), key, simple)

    def update(
        self,
        kind: str,
        table: str,
        key: tuple[tuple[str, Any], ...],
        set_sql: str,
        set_params: tuple[Any, ...],
        *,
        ttl_ok: bool = False,
    ) -> _Stmt:
        """UPDATE table SET set_sql WHERE key."""
        where, where_params = _where(key)
        return _Stmt(
            kind,
            table,
            self.partition_of(table, key),
            f"UPDATE {self.q(table)}",
            (),
            f" SET {set_sql}{where}",
            (*set_params, *where_params),
            ttl_ok=ttl_ok,
        )

    def delete(
        self,
        kind: str,
        table: str,
        key: tuple[tuple[str, Any], ...],
        what: str = "",
        what_params: tuple[Any, ...] = (),
        extra: tuple[str, tuple[Any, ...]] = ("", ()),
    ) -> _Stmt:
        """DELETE [what] FROM table WHERE key [extra]: ``extra`` adds clustering slice restrictions."""
        where, where_params = _where(key)
        return _Stmt(
            kind,
            table,
            self.partition_of(table, key),
            f"DELETE {what + ' ' if what else ''}FROM {self.q(table)}",
            what_params,
            where + extra[0],
            (*where_params, *extra[1]),
        )

    # -- one statement of each kind (timestamp and TTL added by the caller)

    def insert(self) -> _Stmt:
        rng = self.rng
        table = rng.choices(("kv", "wide", "typed"), (4, 4, 3))[0]
        values: dict[str, Any] = {}
        if table == "kv":
            key = self.kv_key()
            simple = self.simple_columns("kv")
            for c in self.subset(list(simple), 0.6):
                values[c] = self.value(simple[c])
            for c, gen in (
                ("tags", _word_set),
                ("items", _int_list),
                ("attrs", _text_int_map),
                ("addr", _address),
            ):
                if rng.random() < 0.3:
                    values[c] = self.value(gen)
        elif table == "wide":
            r = rng.random()
            if r < 0.15:  # primary key only: a row that lives by its liveness alone
                key = self.wide_row()
            elif r < 0.3:  # static cells only: the partition reads as one row with null clustering
                key = self.wide_partition()
                values["s"] = self.value(_text)
                if rng.random() < 0.5:
                    values["s_tags"] = _word_set(rng)
            else:
                key = self.wide_row()
                for c in self.subset(["v1", "v2"], 0.8):
                    values[c] = self.value(_SIMPLE["wide"][c])
                if rng.random() < 0.3:
                    values["vals"] = _int_text_map(rng)
                if rng.random() < 0.3:
                    values["s"] = self.value(_text)
        else:
            key = self.typed_key()
            for c in self.subset(list(_TYPED), 0.4):
                values[c] = self.value(_TYPED[c][1])
        columns = [name for name, _ in key] + list(values)
        params = tuple(v for _, v in key) + tuple(values.values())
        head = (
            f"INSERT INTO {self.q(table)} ({', '.join(columns)}) VALUES ({', '.join(['%s'] * len(columns))})"
        )
        stmt = _Stmt("insert", table, self.partition_of(table, key), head, params, ttl_ok=True)
        stmt.write = self.remember(table, key, values)
        return stmt

    def update_cells(self) -> _Stmt:
        rng = self.rng
        table = rng.choices(("kv", "wide", "typed"), (4, 4, 3))[0]
        if table == "kv":
            key, simple = self.kv_key(), self.simple_columns("kv")
            columns = self.subset(list(simple), 0.4)
        elif table == "wide":
            key, simple = self.wide_row(), _SIMPLE["wide"]
            columns = self.subset(["v1", "v2"], 0.7) + (["s"] if rng.random() < 0.2 else [])
        else:
            key, simple = self.typed_key(), _SIMPLE["typed"]
            columns = self.subset(list(simple), 0.15)
        values = {c: self.value(simple[c]) for c in columns}
        set_sql, set_params = _set_clause(values)
        stmt = self.update("update", table, key, set_sql, set_params, ttl_ok=True)
        stmt.write = self.remember(table, key, values)
        return stmt

    def update_static(self) -> _Stmt:
        key = self.wide_partition()
        values: dict[str, Any] = {}
        if self.rng.random() < 0.8:
            values["s"] = self.value(_text)
        if not values or self.rng.random() < 0.3:
            values["s_tags"] = _word_set(self.rng)
        set_sql, set_params = _set_clause(values)
        stmt = self.update("update_static", "wide", key, set_sql, set_params, ttl_ok=True)
        stmt.write = self.remember("wide", key, values)
        return stmt

    def list_op(self, kind: str) -> _Stmt:
        key, rng = self.kv_key(), self.rng
        elements = [rng.randint(0, 20) for _ in range(rng.randint(1, 3))]
        sql = {
            "list_append": "items = items + %s",
            "list_prepend": "items = %s + items",
            "list_remove": "items = items - %s",
        }[kind]
        return self.update(kind, "kv", key, sql, (elements,), ttl_ok=kind != "list_remove")

    def set_op(self, kind: str) -> _Stmt:
        rng = self.rng
        table, column = rng.choice((("kv", "tags"), ("wide", "s_tags")))
        key = self.kv_key() if table == "kv" else self.wide_partition()
        elements = set(rng.sample(WORDS, rng.randint(1, 3)))
        op = "+" if kind == "set_add" else "-"
        return self.update(kind, table, key, f"{column} = {column} {op} %s", (elements,), ttl_ok=op == "+")

    def map_target(self) -> tuple[str, str, tuple[tuple[str, Any], ...], Gen, Gen]:
        """(table, column, key, key generator, value generator) of one of the non-frozen maps."""
        rng = self.rng
        table = rng.choice(("kv", "wide", "typed"))
        if table == "kv":
            return table, "attrs", self.kv_key(), lambda r: r.choice(MAP_KEYS), lambda r: r.randint(-99, 99)
        if table == "wide":
            return table, "vals", self.wide_row(), lambda r: r.randrange(10), lambda r: _text(r, "abc", 4)
        return (
            table,
            "c_map",
            self.typed_key(),
            lambda r: r.choice(MAP_KEYS),
            lambda r: set(r.sample(range(50), r.randint(0, 3))),
        )

    def map_put(self) -> _Stmt:
        table, column, key, key_gen, value_gen = self.map_target()
        if self.rng.random() < 0.5:
            return self.update(
                "map_put",
                table,
                key,
                f"{column}[%s] = %s",
                (key_gen(self.rng), value_gen(self.rng)),
                ttl_ok=True,
            )
        entries = {key_gen(self.rng): value_gen(self.rng) for _ in range(self.rng.randint(1, 3))}
        return self.update("map_put", table, key, f"{column} = {column} + %s", (entries,), ttl_ok=True)

    def map_remove(self) -> _Stmt:
        table, column, key, key_gen, _value_gen = self.map_target()
        if self.rng.random() < 0.5:
            return self.delete("map_remove", table, key, f"{column}[%s]", (key_gen(self.rng),))
        keys = {key_gen(self.rng) for _ in range(self.rng.randint(1, 2))}
        return self.update("map_remove", table, key, f"{column} = {column} - %s", (keys,))

    def collection_overwrite(self) -> _Stmt:
        rng = self.rng
        table, column, gen = rng.choice(
            (
                ("kv", "tags", _word_set),
                ("kv", "items", _int_list),
                ("kv", "attrs", _text_int_map),
                ("kv", "addr", _address),
                ("wide", "vals", _int_text_map),
                ("wide", "s_tags", _word_set),
                ("typed", "c_map", _map_of_sets),
            )
        )
        if table == "kv":
            key = self.kv_key()
        elif table == "typed":
            key = self.typed_key()
        else:
            key = self.wide_partition() if column == "s_tags" else self.wide_row()
        return self.update("collection_overwrite", table, key, f"{column} = %s", (gen(rng),), ttl_ok=True)

    def udt_field(self) -> _Stmt:
        fields = self.subset(list(_ADDRESS_FIELDS), 0.3)
        values = tuple(self.value(_ADDRESS_FIELDS[f]) for f in fields)
        sql = ", ".join(f"addr.{f} = %s" for f in fields)
        return self.update("udt_field", "kv", self.kv_key(), sql, values, ttl_ok=True)

    def delete_cells(self) -> _Stmt:
        rng = self.rng
        table = rng.choice(("kv", "wide", "typed"))
        if table == "kv":
            choices = [*self.simple_columns("kv"), "tags", "items", "attrs", "addr"]
            what = self.subset(choices, 0.2)
            if rng.random() < 0.2:
                what = [f"addr.{rng.choice(list(_ADDRESS_FIELDS))}"]  # one field of the non-frozen UDT
            return self.delete("delete_cells", "kv", self.kv_key(), ", ".join(what))
        if table == "wide":
            if rng.random() < 0.25:  # static cells belong to the partition
                what = self.subset(["s", "s_tags"], 0.5)
                return self.delete("delete_cells", "wide", self.wide_partition(), ", ".join(what))
            return self.delete(
                "delete_cells", "wide", self.wide_row(), ", ".join(self.subset(["v1", "v2", "vals"], 0.4))
            )
        return self.delete(
            "delete_cells", "typed", self.typed_key(), ", ".join(self.subset(list(_TYPED), 0.1))
        )

    def delete_row(self) -> _Stmt:
        return self.delete("delete_row", "wide", self.wide_row())

    def delete_range(self) -> _Stmt:
        """Range tombstones: a clustering prefix, and slices with each kind of bound on ck1 (ASC) and on
        ck2 (DESC, where the bounds' order on disk is reversed)."""
        rng = self.rng
        key = self.wide_partition()
        a, b = sorted(rng.sample(range(CK1), 2))
        x, y = sorted(rng.sample(CK2, 2))
        ck1 = rng.randrange(CK1)
        choices: list[tuple[str, tuple[Any, ...]]] = [
            (" AND ck1 = %s", (ck1,)),
            (" AND ck1 > %s AND ck1 <= %s", (a, b)),
            (" AND ck1 >= %s AND ck1 < %s", (a, b)),
            (" AND ck1 >= %s AND ck1 <= %s", (a, b)),
            (" AND ck1 > %s AND ck1 < %s", (a, b)),
            (" AND ck1 >= %s", (a,)),
            (" AND ck1 < %s", (b,)),
            (" AND ck1 = %s AND ck2 > %s AND ck2 <= %s", (ck1, x, y)),
            (" AND ck1 = %s AND ck2 >= %s AND ck2 < %s", (ck1, x, y)),
            (" AND ck1 = %s AND ck2 >= %s", (ck1, x)),
            (" AND ck1 = %s AND ck2 < %s", (ck1, y)),
        ]
        return self.delete("delete_range", "wide", key, extra=rng.choice(choices))

    def delete_partition(self) -> _Stmt:
        table = self.rng.choice(("kv", "wide", "typed"))
        key = {"kv": self.kv_key, "wide": self.wide_partition, "typed": self.typed_key}[table]()
        return self.delete("delete_partition", table, key)

    def statement(self, kind: str) -> _Stmt:
        if kind == "insert":
            return self.insert()
        if kind == "update":
            return self.update_cells()
        if kind.startswith("list_"):
            return self.list_op(kind)
        if kind.startswith("set_"):
            return self.set_op(kind)
        return getattr(self, kind)()

    # -- operations

    def operation(self, index: int) -> Operation:
        rng = self.rng
        if self.history and rng.random() < COLLISION_RATE:
            op = self.collision()
            if op is not None:
                return op
        kind = rng.choices(self.kinds, self.weights)[0]
        if kind in ("lwt_insert", "lwt_update"):
            return self.lwt(kind)
        if kind == "counter":
            return self.counter()
        timestamp = self.base + index
        if rng.random() < OUT_OF_ORDER_RATE:
            timestamp -= rng.randint(1, index + 100)
        if kind == "batch":
            return self.batch(timestamp)
        stmt = self.statement(kind)
        ttl = self.ttl() if stmt.ttl_ok and rng.random() < TTL_RATE else None
        return self.finish(stmt, timestamp, ttl)

    def finish(self, stmt: _Stmt, timestamp: int, ttl: int | None) -> Operation:
        kind = f"{stmt.kind}_ttl" if ttl is not None and stmt.kind in ("insert", "update") else stmt.kind
        if stmt.write is not None and stmt.write.values:
            stmt.write.timestamp = timestamp
            self.history.append(stmt.write)
        cql, params = stmt.render(timestamp, ttl)
        return Operation(kind, stmt.table, cql, params, timestamp, stmt.partition, ttl)

    def collision(self) -> Operation | None:
        """Cells of an earlier write written again at exactly its timestamp: with another value (the
        greater serialized value wins), with a TTL (the expiring cell wins) or deleted (the tombstone wins)."""
        rng = self.rng
        earlier = rng.choice(self.history[-300:])
        columns = [c for c in earlier.values if self.writable(earlier.table, c)]
        if not columns:
            return None
        columns = rng.sample(columns, rng.randint(1, len(columns)))
        key = earlier.key
        if all(c in _STATIC for c in columns):
            key = key[:2]  # a statement touching only static cells must not name a row
        deletable = [c for c in columns if not (c in _STATIC and len(key) > 2)]
        if deletable and rng.random() < 0.2:
            stmt = self.delete("delete_cells", earlier.table, key, ", ".join(deletable))
            return self.finish(stmt, earlier.timestamp, None)
        generators = _SIMPLE[earlier.table]
        values: dict[str, Any] = {}
        for c in columns:
            value = generators[c](rng)
            for _ in range(10):
                if value != earlier.values[c]:
                    break
                value = generators[c](rng)
            values[c] = value
        set_sql, set_params = _set_clause(values)
        stmt = self.update("update", earlier.table, key, set_sql, set_params)
        stmt.write = self.remember(earlier.table, key, values)
        ttl = self.ttl() if rng.random() < 0.2 else None
        return self.finish(stmt, earlier.timestamp, ttl)

    def batch(self, timestamp: int) -> Operation:
        """A logged batch of 2-4 statements over tables and partitions, all at the batch's timestamp."""
        parts: list[str] = []
        params: list[Any] = [timestamp]
        tables: list[str] = []
        ttls: list[int] = []
        first: _Stmt | None = None
        for _ in range(self.rng.randint(2, 4)):
            stmt = self.statement(self.rng.choice(_BATCH_KINDS))
            first = first or stmt
            ttl = self.ttl() if stmt.ttl_ok and self.rng.random() < TTL_RATE else None
            if ttl is not None:
                ttls.append(ttl)
            cql, stmt_params = stmt.render(None, ttl)
            parts.append(cql)
            params.extend(stmt_params)
            tables.append(stmt.table)
            if stmt.write is not None and stmt.write.values:
                stmt.write.timestamp = timestamp
                self.history.append(stmt.write)
        assert first is not None
        cql = "BEGIN BATCH USING TIMESTAMP %s\n" + "".join(f"  {p};\n" for p in parts) + "APPLY BATCH"
        return Operation(
            "batch",
            ",".join(dict.fromkeys(tables)),
            cql,
            tuple(params),
            timestamp,
            first.partition,
            max(ttls, default=None),
        )

    def lwt(self, kind: str) -> Operation:
        """LWT on a few kv ids only: Paxos stamps them with the wall clock, newer than every USING TIMESTAMP,
        so they would shadow every later write to the cells they touch."""
        rng = self.rng
        id_ = rng.choice(LWT_IDS)
        name, score = _text(rng), _integer(64)(rng)
        if kind == "lwt_insert":
            cql = f"INSERT INTO {self.q('kv')} (id, name, score) VALUES (%s, %s, %s) IF NOT EXISTS"
            params: tuple[Any, ...] = (id_, name, score)
        else:
            expected = self.names.get(id_) if rng.random() < 0.7 else None
            cql = f"UPDATE {self.q('kv')} SET name = %s, score = %s WHERE id = %s IF name = %s"
            params = (name, score, id_, expected if expected is not None else _text(rng))
        self.names[id_] = name
        return Operation(kind, "kv", cql, params, None, (id_,))

    def counter(self) -> Operation:
        rng = self.rng
        page, day = f"p{rng.randrange(PAGES)}", rng.choice(DAYS)
        delta = rng.randint(-5, 20)
        sets = rng.choice(("n = n + %s", "m = m + %s", "n = n + %s, m = m - %s"))
        params = (delta,) * sets.count("%s") + (page, day)
        cql = f"UPDATE {self.q('hits')} SET {sets} WHERE page = %s AND day = %s"
        return Operation("counter", "hits", cql, params, None, (page,))


# ---------------------------------------------------------------------------------------------------------


class Workload:
    """The schema and the operations of one seeded run. Use a fresh keyspace for every run: the tables are
    created with the column the run drops and without the one it adds."""

    def __init__(
        self,
        keyspace: str,
        seed: int,
        *,
        replication_factor: int = 3,
        base_time_us: int,
        ttl_range_s: tuple[int, int] = (3, 30),
    ) -> None:
        if not _KEYSPACE.fullmatch(keyspace):
            raise ValueError(
                f"keyspace {keyspace!r}: use 1-48 lowercase letters, digits or _, starting with a letter"
            )
        if not 1 <= ttl_range_s[0] <= ttl_range_s[1]:
            raise ValueError(f"ttl_range_s {ttl_range_s}: need 1 <= low <= high")
        self.keyspace = keyspace
        self.seed = seed
        self.replication_factor = replication_factor
        self.base_time_us = base_time_us
        self.ttl_range_s = ttl_range_s

    def tables(self) -> list[str]:
        return ["kv", "wide", "typed", "hits"]

    def setup_statements(self) -> list[str]:
        ks = self.keyspace
        typed_columns = ",\n  ".join(f"{name} {cql_type}" for name, (cql_type, _gen) in _TYPED.items())
        return [
            f"CREATE KEYSPACE IF NOT EXISTS {ks} WITH replication = "
            f"{{'class': 'SimpleStrategy', 'replication_factor': {self.replication_factor}}}",
            f"CREATE TYPE IF NOT EXISTS {ks}.point (x double, y double)",
            f"CREATE TYPE IF NOT EXISTS {ks}.address (street text, city text, zip int, phones frozen<list<text>>)",
            f"CREATE TABLE IF NOT EXISTS {ks}.kv (\n"
            "  id int PRIMARY KEY,\n  name text,\n  score bigint,\n"
            f"  {DROPPED_COLUMN} text,\n"
            "  tags set<text>,\n  items list<int>,\n  attrs map<text, int>,\n"
            "  loc frozen<point>,\n  addr address\n) WITH cdc = true",
            f"CREATE TABLE IF NOT EXISTS {ks}.wide (\n"
            "  tenant text, bucket int, ck1 int, ck2 text,\n"
            "  s text STATIC, s_tags set<text> STATIC,\n"
            "  v1 int, v2 text, vals map<int, text>,\n"
            "  PRIMARY KEY ((tenant, bucket), ck1, ck2)\n"
            ") WITH CLUSTERING ORDER BY (ck1 ASC, ck2 DESC) AND cdc = true",
            f"CREATE TABLE IF NOT EXISTS {ks}.typed (\n  id uuid PRIMARY KEY,\n  {typed_columns}\n) WITH cdc = true",
            f"CREATE TABLE IF NOT EXISTS {ks}.hits (\n"
            "  page text, day date, n counter, m counter,\n  PRIMARY KEY ((page), day)\n) WITH cdc = true",
        ]

    def phases(self, operations: int) -> list[Phase]:
        """Three phases of about a third of the operations each: kv gains a column after the first (later
        operations write it) and loses another after the second (later operations never write it)."""
        generator = _Generator(self)
        first, second = operations // 3, 2 * operations // 3
        phase1 = [generator.operation(i) for i in range(first)]
        generator.added = True
        phase2 = [generator.operation(i) for i in range(first, second)]
        generator.dropped = True
        phase3 = [generator.operation(i) for i in range(second, operations)]
        return [
            Phase(phase1, [f"ALTER TABLE {self.keyspace}.kv ADD {ADDED_COLUMN[0]} {ADDED_COLUMN[1]}"]),
            Phase(phase2, [f"ALTER TABLE {self.keyspace}.kv DROP {DROPPED_COLUMN}"]),
            Phase(phase3, []),
        ]
