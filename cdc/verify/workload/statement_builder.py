"""One CQL statement of each kind the workload writes, its timestamp and TTL left for the caller to add.

The builder knows the schema as it is at this point of the run (whether kv has gained its added column and
lost its dropped one) and the last name written to each kv id, which LWT conditions test."""

from __future__ import annotations

import random
from typing import Any

from cdc.verify.workload.cell_write import ADD, DELETE, FIELD, LIVENESS, REMOVE, SET, CellWrite
from cdc.verify.workload.random_values import (
    MAP_KEYS,
    WORDS,
    Gen,
    address,
    int_list,
    int_text_map,
    map_of_sets,
    text,
    text_int_map,
    uuid_v4,
    word_set,
)
from cdc.verify.workload.schema import (
    ADDED_COLUMN,
    ADDRESS_FIELDS,
    BUCKETS,
    CK1,
    CK2,
    DROPPED_COLUMN,
    KV_IDS,
    NOTE_ONLY_IDS,
    ROWS_IDS,
    ROWS_SEQ,
    SIMPLE_COLUMNS,
    STATIC_COLUMNS,
    TENANTS,
    TYPED_COLUMNS,
    TYPED_IDS,
)
from cdc.verify.workload.statement import DraftStatement, Key, WrittenCells, set_clause, where_clause

NULL_RATE = 0.10  # of values in INSERT/UPDATE: null, which writes a tombstone


class StatementBuilder:
    """Draws keys, columns and values from the run's random stream and shapes them into statements."""

    def __init__(self, keyspace: str, rng: random.Random) -> None:
        self.ks = keyspace
        self.rng = rng
        self.typed_ids = [uuid_v4(self.rng) for _ in range(TYPED_IDS)]
        self.added = False
        self.dropped = False
        self.names: dict[int, str] = {}  # last name written to each kv id, for LWT conditions

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
        return {c: g for c, g in SIMPLE_COLUMNS[table].items() if self.writable(table, c)}

    def value(self, gen: Gen) -> Any:
        return None if self.rng.random() < NULL_RATE else gen(self.rng)

    def subset(self, columns: list[str], p: float, at_least: int = 1) -> list[str]:
        chosen = [c for c in columns if self.rng.random() < p]
        return chosen or self.rng.sample(columns, min(at_least, len(columns)))

    def kv_key(self) -> Key:
        return (("id", self.rng.randrange(KV_IDS)),)

    def wide_partition(self) -> Key:
        return (("tenant", self.rng.choice(TENANTS)), ("bucket", self.rng.randrange(BUCKETS)))

    def wide_row(self) -> Key:
        return (*self.wide_partition(), ("ck1", self.rng.randrange(CK1)), ("ck2", self.rng.choice(CK2)))

    def typed_key(self) -> Key:
        return (("id", self.rng.choice(self.typed_ids)),)

    def rows_partition(self) -> Key:
        return (("id", self.rng.randrange(ROWS_IDS)),)

    def rows_row(self) -> Key:
        return (*self.rows_partition(), ("seq", self.rng.randrange(ROWS_SEQ)))

    @staticmethod
    def scope(table: str, key: Key, column: str | None) -> Key:
        """The key a column's cells belong to: the partition key for a static column."""
        return key[:2] if table == "wide" and column in STATIC_COLUMNS else key

    def cells(self, table: str, key: Key, mode: str, values: dict[str, Any]) -> list[CellWrite]:
        """One write of ``mode`` per column of ``values``."""
        return [CellWrite(table, self.scope(table, key, c), c, mode, v) for c, v in values.items()]

    def deletions(self, table: str, key: Key, columns: list[str]) -> list[CellWrite]:
        """``DELETE columns``: a column, or one field of the UDT (``addr.city``)."""
        out = []
        for column in columns:
            name, _, udt_field = column.partition(".")
            if udt_field:
                out.append(CellWrite(table, key, name, FIELD, (udt_field, None)))
            else:
                out.append(CellWrite(table, self.scope(table, key, name), name, DELETE))
        return out

    @staticmethod
    def partition_of(table: str, key: Key) -> tuple[Any, ...]:
        count = 2 if table == "wide" else 1
        return tuple(v for _, v in key[:count])

    def remember(self, table: str, key: Key, values: dict[str, Any]) -> WrittenCells:
        if table == "kv" and "name" in values and values["name"] is not None:
            self.names[key[0][1]] = values["name"]
        simple = {c: v for c, v in values.items() if c in SIMPLE_COLUMNS[table]}
        return WrittenCells(table, self.partition_of(table, key), key, simple)

    def update(
        self,
        kind: str,
        table: str,
        key: Key,
        set_sql: str,
        set_params: tuple[Any, ...],
        *,
        ttl_ok: bool = False,
    ) -> DraftStatement:
        """UPDATE table SET set_sql WHERE key."""
        where, where_params = where_clause(key)
        return DraftStatement(
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
        key: Key,
        what: str = "",
        what_params: tuple[Any, ...] = (),
        extra: tuple[str, tuple[Any, ...]] = ("", ()),
    ) -> DraftStatement:
        """DELETE [what] FROM table WHERE key [extra]: ``extra`` adds clustering slice restrictions."""
        where, where_params = where_clause(key)
        return DraftStatement(
            kind,
            table,
            self.partition_of(table, key),
            f"DELETE {what + ' ' if what else ''}FROM {self.q(table)}",
            what_params,
            where + extra[0],
            (*where_params, *extra[1]),
        )

    # -- one statement of each kind (timestamp and TTL added by the caller)

    def insert(self) -> DraftStatement:
        rng = self.rng
        table = rng.choices(("kv", "wide", "typed", "rows"), (4, 4, 3, 4))[0]
        values: dict[str, Any] = {}
        if table == "rows":
            key = self.rows_row()
            for c in self.subset(list(SIMPLE_COLUMNS["rows"]), 0.8):
                values[c] = self.value(SIMPLE_COLUMNS["rows"][c])
        elif table == "kv":
            key = self.kv_key()
            simple = self.simple_columns("kv")
            for c in self.subset(list(simple), 0.6):
                values[c] = self.value(simple[c])
            for c, gen in (
                ("tags", word_set),
                ("items", int_list),
                ("attrs", text_int_map),
                ("addr", address),
            ):
                if rng.random() < 0.3:
                    values[c] = self.value(gen)
        elif table == "wide":
            r = rng.random()
            if r < 0.15:  # primary key only: a row that lives by its liveness alone
                key = self.wide_row()
            elif r < 0.3:  # static cells only: the partition reads as one row with null clustering
                key = self.wide_partition()
                values["s"] = self.value(text)
                if rng.random() < 0.5:
                    values["s_tags"] = word_set(rng)
            else:
                key = self.wide_row()
                for c in self.subset(["v1", "v2"], 0.8):
                    values[c] = self.value(SIMPLE_COLUMNS["wide"][c])
                if rng.random() < 0.3:
                    values["vals"] = int_text_map(rng)
                if rng.random() < 0.3:
                    values["s"] = self.value(text)
        else:
            key = self.typed_key()
            for c in self.subset(list(TYPED_COLUMNS), 0.4):
                values[c] = self.value(TYPED_COLUMNS[c][1])
        columns = [name for name, _ in key] + list(values)
        params = tuple(v for _, v in key) + tuple(values.values())
        head = (
            f"INSERT INTO {self.q(table)} ({', '.join(columns)}) VALUES ({', '.join(['%s'] * len(columns))})"
        )
        stmt = DraftStatement("insert", table, self.partition_of(table, key), head, params, ttl_ok=True)
        stmt.write = self.remember(table, key, values)
        static_only = table == "wide" and len(key) == 2  # the static row has no row marker
        stmt.writes = [] if static_only else [CellWrite(table, key, None, LIVENESS)]
        stmt.writes += self.cells(table, key, SET, values)
        return stmt

    def update_cells(self) -> DraftStatement:
        rng = self.rng
        table = rng.choices(("kv", "wide", "typed", "rows"), (4, 4, 3, 4))[0]
        if table == "rows":
            key, simple = self.rows_row(), SIMPLE_COLUMNS["rows"]
            columns = self.subset(list(simple), 0.5)
        elif table == "kv":
            key, simple = self.kv_key(), self.simple_columns("kv")
            columns = self.subset(list(simple), 0.4)
        elif table == "wide":
            key, simple = self.wide_row(), SIMPLE_COLUMNS["wide"]
            columns = self.subset(["v1", "v2"], 0.7) + (["s"] if rng.random() < 0.2 else [])
        else:
            key, simple = self.typed_key(), SIMPLE_COLUMNS["typed"]
            columns = self.subset(list(simple), 0.15)
        values = {c: self.value(simple[c]) for c in columns}
        set_sql, set_params = set_clause(values)
        stmt = self.update("update", table, key, set_sql, set_params, ttl_ok=True)
        stmt.write = self.remember(table, key, values)
        stmt.writes = self.cells(table, key, SET, values)
        return stmt

    def note_only(self) -> DraftStatement:
        """``UPDATE kv SET note = ?`` on an id nothing else writes: a row that lives by the column the run
        drops, which the DROP then makes disappear (only drawn before the drop)."""
        key: Key = (("id", self.rng.choice(NOTE_ONLY_IDS)),)
        values = {DROPPED_COLUMN: text(self.rng)}
        set_sql, set_params = set_clause(values)
        stmt = self.update("note_only", "kv", key, set_sql, set_params)
        stmt.write = self.remember("kv", key, values)
        stmt.writes = self.cells("kv", key, SET, values)
        return stmt

    def update_static(self) -> DraftStatement:
        key = self.wide_partition()
        values: dict[str, Any] = {}
        if self.rng.random() < 0.8:
            values["s"] = self.value(text)
        if not values or self.rng.random() < 0.3:
            values["s_tags"] = word_set(self.rng)
        set_sql, set_params = set_clause(values)
        stmt = self.update("update_static", "wide", key, set_sql, set_params, ttl_ok=True)
        stmt.write = self.remember("wide", key, values)
        stmt.writes = self.cells("wide", key, SET, values)
        return stmt

    def list_op(self, kind: str) -> DraftStatement:
        key, rng = self.kv_key(), self.rng
        elements = [rng.randint(0, 20) for _ in range(rng.randint(1, 3))]
        sql = {
            "list_append": "items = items + %s",
            "list_prepend": "items = %s + items",
            "list_remove": "items = items - %s",
        }[kind]
        stmt = self.update(kind, "kv", key, sql, (elements,), ttl_ok=kind != "list_remove")
        stmt.writes = self.cells("kv", key, REMOVE if kind == "list_remove" else ADD, {"items": elements})
        return stmt

    def set_op(self, kind: str) -> DraftStatement:
        rng = self.rng
        table, column = rng.choice((("kv", "tags"), ("wide", "s_tags")))
        key = self.kv_key() if table == "kv" else self.wide_partition()
        elements = set(rng.sample(WORDS, rng.randint(1, 3)))
        op = "+" if kind == "set_add" else "-"
        stmt = self.update(kind, table, key, f"{column} = {column} {op} %s", (elements,), ttl_ok=op == "+")
        stmt.writes = self.cells(table, key, ADD if op == "+" else REMOVE, {column: elements})
        return stmt

    def map_target(self) -> tuple[str, str, Key, Gen, Gen]:
        """(table, column, key, key generator, value generator) of one of the non-frozen maps."""
        rng = self.rng
        table = rng.choice(("kv", "wide", "typed"))
        if table == "kv":
            return table, "attrs", self.kv_key(), lambda r: r.choice(MAP_KEYS), lambda r: r.randint(-99, 99)
        if table == "wide":
            return table, "vals", self.wide_row(), lambda r: r.randrange(10), lambda r: text(r, "abc", 4)
        return (
            table,
            "c_map",
            self.typed_key(),
            lambda r: r.choice(MAP_KEYS),
            lambda r: set(r.sample(range(50), r.randint(0, 3))),
        )

    def map_put(self) -> DraftStatement:
        table, column, key, key_gen, value_gen = self.map_target()
        if self.rng.random() < 0.5:
            map_key, map_value = key_gen(self.rng), value_gen(self.rng)
            stmt = self.update("map_put", table, key, f"{column}[%s] = %s", (map_key, map_value), ttl_ok=True)
            stmt.writes = self.cells(table, key, ADD, {column: {map_key: map_value}})
            return stmt
        entries = {key_gen(self.rng): value_gen(self.rng) for _ in range(self.rng.randint(1, 3))}
        stmt = self.update("map_put", table, key, f"{column} = {column} + %s", (entries,), ttl_ok=True)
        stmt.writes = self.cells(table, key, ADD, {column: entries})
        return stmt

    def map_remove(self) -> DraftStatement:
        table, column, key, key_gen, _value_gen = self.map_target()
        if self.rng.random() < 0.5:
            map_key = key_gen(self.rng)
            stmt = self.delete("map_remove", table, key, f"{column}[%s]", (map_key,))
            stmt.writes = self.cells(table, key, REMOVE, {column: [map_key]})
            return stmt
        keys = {key_gen(self.rng) for _ in range(self.rng.randint(1, 2))}
        stmt = self.update("map_remove", table, key, f"{column} = {column} - %s", (keys,))
        stmt.writes = self.cells(table, key, REMOVE, {column: keys})
        return stmt

    def collection_overwrite(self) -> DraftStatement:
        rng = self.rng
        table, column, gen = rng.choice(
            (
                ("kv", "tags", word_set),
                ("kv", "items", int_list),
                ("kv", "attrs", text_int_map),
                ("kv", "addr", address),
                ("wide", "vals", int_text_map),
                ("wide", "s_tags", word_set),
                ("typed", "c_map", map_of_sets),
            )
        )
        if table == "kv":
            key = self.kv_key()
        elif table == "typed":
            key = self.typed_key()
        else:
            key = self.wide_partition() if column == "s_tags" else self.wide_row()
        value = gen(rng)
        stmt = self.update("collection_overwrite", table, key, f"{column} = %s", (value,), ttl_ok=True)
        stmt.writes = self.cells(table, key, SET, {column: value})
        return stmt

    def udt_field(self) -> DraftStatement:
        fields = self.subset(list(ADDRESS_FIELDS), 0.3)
        values = tuple(self.value(ADDRESS_FIELDS[f]) for f in fields)
        sql = ", ".join(f"addr.{f} = %s" for f in fields)
        key = self.kv_key()
        stmt = self.update("udt_field", "kv", key, sql, values, ttl_ok=True)
        stmt.writes = [CellWrite("kv", key, "addr", FIELD, pair) for pair in zip(fields, values, strict=True)]
        return stmt

    def delete_cells(self) -> DraftStatement:
        rng = self.rng
        table = rng.choice(("kv", "wide", "typed", "rows"))
        if table == "rows":
            return self.delete_columns(
                "rows", self.rows_row(), self.subset(list(SIMPLE_COLUMNS["rows"]), 0.3)
            )
        if table == "kv":
            choices = [*self.simple_columns("kv"), "tags", "items", "attrs", "addr"]
            what = self.subset(choices, 0.2)
            if rng.random() < 0.2:
                what = [f"addr.{rng.choice(list(ADDRESS_FIELDS))}"]  # one field of the non-frozen UDT
            return self.delete_columns("kv", self.kv_key(), what)
        if table == "wide":
            if rng.random() < 0.25:  # static cells belong to the partition
                what = self.subset(["s", "s_tags"], 0.5)
                return self.delete_columns("wide", self.wide_partition(), what)
            return self.delete_columns("wide", self.wide_row(), self.subset(["v1", "v2", "vals"], 0.4))
        return self.delete_columns("typed", self.typed_key(), self.subset(list(TYPED_COLUMNS), 0.1))

    def delete_columns(self, table: str, key: Key, columns: list[str]) -> DraftStatement:
        stmt = self.delete("delete_cells", table, key, ", ".join(columns))
        stmt.writes = self.deletions(table, key, columns)
        return stmt

    def delete_row(self) -> DraftStatement:
        table = self.rng.choice(("wide", "rows"))
        key = self.wide_row() if table == "wide" else self.rows_row()
        stmt = self.delete("delete_row", table, key)
        stmt.writes = [CellWrite(table, key, None, DELETE)]
        return stmt

    def delete_range(self) -> DraftStatement:
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
        stmt = self.delete("delete_range", "wide", key, extra=rng.choice(choices))
        stmt.writes = [CellWrite("wide", key, None, DELETE)]
        return stmt

    def delete_partition(self) -> DraftStatement:
        table = self.rng.choice(("kv", "wide", "typed", "rows"))
        key = {
            "kv": self.kv_key,
            "wide": self.wide_partition,
            "typed": self.typed_key,
            "rows": self.rows_partition,
        }[table]()
        stmt = self.delete("delete_partition", table, key)
        stmt.writes = [CellWrite(table, key, None, DELETE)]
        return stmt

    def statement(self, kind: str) -> DraftStatement:
        if kind == "insert":
            return self.insert()
        if kind == "update":
            return self.update_cells()
        if kind.startswith("list_"):
            return self.list_op(kind)
        if kind.startswith("set_"):
            return self.set_op(kind)
        return getattr(self, kind)()
