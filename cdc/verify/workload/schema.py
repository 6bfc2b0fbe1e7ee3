"""The tables the workload writes: their DDL, the generator of each column's values, and the small key
space that keeps writes, deletes and late writes landing on the same cells."""

from __future__ import annotations

import datetime as dt

from cdc.verify.workload.random_values import (
    CITIES,
    Gen,
    ascii_text,
    blob,
    boolean,
    date,
    double,
    duration,
    exact_decimal,
    float32,
    float_vector,
    inet,
    int_list,
    int_text_bool_tuple,
    integer,
    map_of_sets,
    point,
    text,
    time_of_day,
    timestamp,
    timeuuid,
    uuid_v4,
    varint,
)

TABLES = ("kv", "wide", "typed", "hits", "rows")

# Few partitions and rows, so writes, deletes and late writes keep landing on the same cells.
KV_IDS = 50
LWT_IDS = range(44, 50)  # LWT writes get the Paxos (wall-clock) timestamp, newer than every USING TIMESTAMP
TENANTS = tuple(f"t{i}" for i in range(6))
BUCKETS = 5
CK1 = 6
CK2 = ("a", "b", "c", "d", "e")
TYPED_IDS = 30
PAGES = 20
#: ``rows``: rows of plain scalar columns, the kind of table the workers' native merge takes whole
ROWS_IDS = 12
ROWS_SEQ = 6
DAYS = (dt.date(2024, 2, 28), dt.date(2024, 2, 29), dt.date(2024, 3, 1))

ADDED_COLUMN = ("extra", "int")  # ALTER TABLE kv ADD after the first phase
DROPPED_COLUMN = "note"  # ALTER TABLE kv DROP after the second phase
#: kv ids above KV_IDS that only ever get their dropped column written (UPDATE kv SET note = ?): rows that
#: live by that cell alone, so the DROP makes them disappear with no write to them
NOTE_ONLY_IDS = range(KV_IDS, KV_IDS + 8)

ADDRESS_FIELDS: dict[str, Gen] = {
    "street": text,
    "city": lambda rng: rng.choice(CITIES),
    "zip": lambda rng: rng.randint(1000, 9999),
    "phones": lambda rng: tuple(f"+46 {rng.randint(100_000, 999_999)}" for _ in range(rng.randint(0, 2))),
}

# One column of every CQL type, named after it.
TYPED_COLUMNS: dict[str, tuple[str, Gen]] = {
    "c_ascii": ("ascii", ascii_text),
    "c_bigint": ("bigint", integer(64)),
    "c_blob": ("blob", blob),
    "c_boolean": ("boolean", boolean),
    "c_date": ("date", date),
    "c_decimal": ("decimal", exact_decimal),
    "c_double": ("double", double),
    "c_duration": ("duration", duration),
    "c_float": ("float", float32),
    "c_inet": ("inet", inet),
    "c_int": ("int", integer(32)),
    "c_smallint": ("smallint", integer(16)),
    "c_text": ("text", text),
    "c_time": ("time", time_of_day),
    "c_timestamp": ("timestamp", timestamp),
    "c_timeuuid": ("timeuuid", timeuuid),
    "c_tinyint": ("tinyint", integer(8)),
    "c_uuid": ("uuid", uuid_v4),
    "c_varint": ("varint", varint),
    "c_tuple": ("tuple<int, text, boolean>", int_text_bool_tuple),
    "c_frozen_list": ("frozen<list<int>>", int_list),
    "c_map": ("map<text, frozen<set<int>>>", map_of_sets),
    "c_vector": ("vector<float, 3>", float_vector),
}

# Cells that hold one value (simple or frozen), per table: what INSERT/UPDATE set and collisions reuse.
SIMPLE_COLUMNS: dict[str, dict[str, Gen]] = {
    "kv": {"name": text, "score": integer(64), "note": text, "extra": integer(32), "loc": point},
    "wide": {"v1": integer(32), "v2": text, "s": text},
    "typed": {name: gen for name, (_type, gen) in TYPED_COLUMNS.items() if name != "c_map"},
    "rows": {"a": integer(32), "b": text, "c": integer(64)},
}
STATIC_COLUMNS = {"s", "s_tags"}


def create_statements(keyspace: str, replication_factor: int) -> list[str]:
    """The keyspace, the UDTs and the tables, created with the column the run drops and without the one it
    adds."""
    ks = keyspace
    typed_columns = ",\n  ".join(f"{name} {cql_type}" for name, (cql_type, _gen) in TYPED_COLUMNS.items())
    return [
        f"CREATE KEYSPACE IF NOT EXISTS {ks} WITH replication = "
        f"{{'class': 'SimpleStrategy', 'replication_factor': {replication_factor}}}",
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
        f"CREATE TABLE IF NOT EXISTS {ks}.rows (\n"
        "  id int, seq int, a int, b text, c bigint,\n  PRIMARY KEY (id, seq)\n) WITH cdc = true",
    ]
