"""The stream of operations one pass over the workload produces: the kind of each, its timestamp (in
order, older, or exactly an earlier write's), its TTL, and the batches, LWT and counter updates that are
more than one drafted statement."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

from cdc.verify.workload.cell_write import DELTA, LIVENESS, SET, CellWrite
from cdc.verify.workload.operation import ONE, QUORUM, Operation
from cdc.verify.workload.random_values import integer, text
from cdc.verify.workload.schema import DAYS, LWT_IDS, PAGES, SIMPLE_COLUMNS, STATIC_COLUMNS
from cdc.verify.workload.statement import DraftStatement, WrittenCells, set_clause
from cdc.verify.workload.statement_builder import StatementBuilder

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
    "note_only": 2,  # until the drop; an update after it
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
ONE_RATE = 0.25  # of operations but LWT: sent at consistency ONE instead of QUORUM


class OperationGenerator:
    """The state one pass over the workload needs: the random stream, the statement builder (which knows
    the schema as it is at this point of the run and the names LWT conditions test), and the cells written
    so far, which collisions write again."""

    def __init__(self, keyspace: str, seed: int, base_time_us: int, ttl_range_s: tuple[int, int]) -> None:
        self.base = base_time_us
        self.ttl_range = ttl_range_s
        self.rng = random.Random(seed)
        # A stream of its own, so the statements of a seed stay what they were before writes at ONE
        self.consistency_rng = random.Random(f"consistency:{seed}")
        self.builder = StatementBuilder(keyspace, self.rng)
        self.history: list[WrittenCells] = []
        self.kinds = list(_WEIGHTS)
        self.weights = list(_WEIGHTS.values())
        self.long_ttls = False
        """The final stretch of the run: every statement that may carry a TTL gets the longest one."""

    def column_added(self) -> None:
        """kv has gained its added column: later operations write it."""
        self.builder.added = True

    def column_dropped(self) -> None:
        """kv has lost its dropped column: later operations never write it."""
        self.builder.dropped = True

    def ttl(self) -> int:
        return self.rng.randint(*self.ttl_range)

    def draw_ttl(self, stmt: DraftStatement) -> int | None:
        """A statement's TTL: a random one at TTL_RATE; in the final stretch always the longest, so that
        TTLs are still running when the workload ends and the live TTL check has cells to compare."""
        if not stmt.ttl_ok:
            return None
        if self.long_ttls:
            return self.ttl_range[1]
        return self.ttl() if self.rng.random() < TTL_RATE else None

    def operation(self, index: int) -> Operation:
        """The operation at ``index``, sent at ONE at ONE_RATE (an LWT always at QUORUM: its Paxos round
        is what makes it conditional)."""
        op = self._draw(index)
        if op.kind.startswith("lwt") or self.consistency_rng.random() >= ONE_RATE:
            return op
        return dataclasses.replace(op, consistency=ONE)

    def _draw(self, index: int) -> Operation:
        rng = self.rng
        if self.history and rng.random() < COLLISION_RATE:
            op = self.collision()
            if op is not None:
                return op
        kind = rng.choices(self.kinds, self.weights)[0]
        if kind == "note_only" and self.builder.dropped:
            kind = "update"
        if kind in ("lwt_insert", "lwt_update"):
            return self.lwt(kind)
        if kind == "counter":
            return self.counter()
        timestamp = self.base + index
        if rng.random() < OUT_OF_ORDER_RATE:
            timestamp -= rng.randint(1, index + 100)
        if kind == "batch":
            return self.batch(timestamp)
        stmt = self.builder.statement(kind)
        return self.finish(stmt, timestamp, self.draw_ttl(stmt))

    def finish(self, stmt: DraftStatement, timestamp: int, ttl: int | None) -> Operation:
        kind = f"{stmt.kind}_ttl" if ttl is not None and stmt.kind in ("insert", "update") else stmt.kind
        if stmt.write is not None and stmt.write.values:
            stmt.write.timestamp = timestamp
            self.history.append(stmt.write)
        cql, params = stmt.render(timestamp, ttl)
        writes = tuple(w.with_ttl(ttl) for w in stmt.writes)
        return Operation(kind, stmt.table, cql, params, timestamp, stmt.partition, ttl, writes, QUORUM)

    def collision(self) -> Operation | None:
        """Cells of an earlier write written again at exactly its timestamp: with another value (the
        greater serialized value wins), with a TTL (the expiring cell wins) or deleted (the tombstone wins)."""
        rng = self.rng
        earlier = rng.choice(self.history[-300:])
        columns = [c for c in earlier.values if self.builder.writable(earlier.table, c)]
        if not columns:
            return None
        columns = rng.sample(columns, rng.randint(1, len(columns)))
        key = earlier.key
        if all(c in STATIC_COLUMNS for c in columns):
            key = key[:2]  # a statement touching only static cells must not name a row
        deletable = [c for c in columns if not (c in STATIC_COLUMNS and len(key) > 2)]
        if deletable and rng.random() < 0.2:
            stmt = self.builder.delete_columns(earlier.table, key, deletable)
            return self.finish(stmt, earlier.timestamp, None)
        generators = SIMPLE_COLUMNS[earlier.table]
        values: dict[str, Any] = {}
        for c in columns:
            value = generators[c](rng)
            for _ in range(10):
                if value != earlier.values[c]:
                    break
                value = generators[c](rng)
            values[c] = value
        set_sql, set_params = set_clause(values)
        stmt = self.builder.update("update", earlier.table, key, set_sql, set_params)
        stmt.write = self.builder.remember(earlier.table, key, values)
        stmt.writes = self.builder.cells(earlier.table, key, SET, values)
        ttl = self.ttl() if rng.random() < 0.2 else None
        return self.finish(stmt, earlier.timestamp, ttl)

    def batch(self, timestamp: int) -> Operation:
        """A logged batch of 2-4 statements over tables and partitions, all at the batch's timestamp."""
        parts: list[str] = []
        params: list[Any] = [timestamp]
        tables: list[str] = []
        ttls: list[int] = []
        writes: list[CellWrite] = []
        first: DraftStatement | None = None
        for _ in range(self.rng.randint(2, 4)):
            stmt = self.builder.statement(self.rng.choice(_BATCH_KINDS))
            first = first or stmt
            ttl = self.draw_ttl(stmt)
            if ttl is not None:
                ttls.append(ttl)
            cql, stmt_params = stmt.render(None, ttl)
            parts.append(cql)
            params.extend(stmt_params)
            tables.append(stmt.table)
            writes.extend(w.with_ttl(ttl) for w in stmt.writes)
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
            tuple(writes),
        )

    def lwt(self, kind: str) -> Operation:
        """LWT on a few kv ids only: Paxos stamps them with the wall clock, newer than every USING TIMESTAMP,
        so they would shadow every later write to the cells they touch."""
        rng = self.rng
        id_ = rng.choice(LWT_IDS)
        name, score = text(rng), integer(64)(rng)
        if kind == "lwt_insert":
            cql = f"INSERT INTO {self.builder.q('kv')} (id, name, score) VALUES (%s, %s, %s) IF NOT EXISTS"
            params: tuple[Any, ...] = (id_, name, score)
        else:
            expected = self.builder.names.get(id_) if rng.random() < 0.7 else None
            cql = f"UPDATE {self.builder.q('kv')} SET name = %s, score = %s WHERE id = %s IF name = %s"
            params = (name, score, id_, expected if expected is not None else text(rng))
        self.builder.names[id_] = name
        key = (("id", id_),)
        writes = [CellWrite("kv", key, "name", SET, name), CellWrite("kv", key, "score", SET, score)]
        if kind == "lwt_insert":
            writes.insert(0, CellWrite("kv", key, None, LIVENESS))
        return Operation(kind, "kv", cql, params, None, (id_,), writes=tuple(writes))

    def counter(self) -> Operation:
        rng = self.rng
        page, day = f"p{rng.randrange(PAGES)}", rng.choice(DAYS)
        delta = rng.randint(-5, 20)
        sets = rng.choice(("n = n + %s", "m = m + %s", "n = n + %s, m = m - %s"))
        params = (delta,) * sets.count("%s") + (page, day)
        cql = f"UPDATE {self.builder.q('hits')} SET {sets} WHERE page = %s AND day = %s"
        key = (("page", page), ("day", day))
        deltas = {
            "n = n + %s": (("n", delta),),
            "m = m + %s": (("m", delta),),
            "n = n + %s, m = m - %s": (("n", delta), ("m", -delta)),
        }[sets]
        writes = tuple(CellWrite("hits", key, column, DELTA, d) for column, d in deltas)
        return Operation("counter", "hits", cql, params, None, (page,), writes=writes)
