"""The clients' writes indexed by row and partition in the clean topics' key form: which operations touched
a key, which elements each wrote to each column, at which timestamps.

A write belongs to a *scope*: a row (the whole primary key named), or a partition (the partition key alone:
static cells, range and partition deletions). A row's image is explained by the writes of its row scope
and, for its static columns, of its partition scope. A partition's static-only row (null clustering
columns) comes and goes with every row of the partition, so every write to the partition touches it.
"""

from __future__ import annotations

import bisect
import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from cassandra_model.table_schema import TableSchema
from cdc.verify.json_forms import ROW_MARKER, TableForms, written_elements
from cdc.verify.workload.cell_write import DELTA, LIVENESS, SET, CellWrite
from cdc.verify.write_ledger import IssuedOperation, SchemaChange
from schemas.driver_rows import key_text

#: how far a server-picked timestamp may lie outside the client's send..return window (the clients and
#: the nodes share one clock here; the slack covers the Paxos ballot's bump past the last one it saw)
SERVER_CLOCK_SLACK_US = 2_000_000
#: the element a counter increment is recorded as (its value is checked by sums, not by element)
INCREMENT = "<increment>"
#: ALTER TABLE <keyspace>.<table> DROP <column>: the table it drops from
_DROP = re.compile(r"ALTER\s+TABLE\s+\w+\.(\w+)\s+DROP\s", re.IGNORECASE)


@dataclass(slots=True)
class ScopeWrites:
    """The writes to one row, or to one partition."""

    ops: set[int] = field(default_factory=set)
    stamped: dict[int, set[int]] = field(default_factory=lambda: defaultdict(set))
    """USING TIMESTAMP -> the operations that carried it."""
    server: list[tuple[int, int, int]] = field(default_factory=list)
    """(sent µs, returned µs, operation) of operations whose timestamp Cassandra picked, by send time."""
    longest_window_us: int = 0
    elements: dict[str, dict[str, set[int]]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(set))
    )
    """Column ("" for the row marker) -> element written -> the operations that wrote it."""
    deltas: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    """Counter column -> every increment issued to it, once per attempt (a timed-out one may apply)."""
    overwrites: set[int] = field(default_factory=set)
    """Operations that overwrote a non-frozen collection or UDT: that deletes it at timestamp - 1."""


@dataclass(slots=True)
class EventScopes:
    """Where to look for the writes that explain one clean-topic key."""

    forms: TableForms
    row: ScopeWrites | None
    partition: ScopeWrites | None
    partition_key: tuple[str, str]
    static_only: bool
    row_key: tuple[str, str] = ("", "")

    def of_column(self, column: str) -> ScopeWrites | None:
        return self.partition if column in self.forms.static_columns else self.row


class LedgerIndex:
    """Built once, after the workload, from what the clients issued and the tables' schemas."""

    def __init__(
        self,
        issued: Iterable[IssuedOperation],
        schemas: dict[str, TableSchema],
        schema_changes: Iterable[SchemaChange] = (),
    ) -> None:
        self.issued: dict[int, IssuedOperation] = {}
        #: per table, the send..return windows (µs) of the ALTER TABLE ... DROPs made on it
        self.drops: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for change in schema_changes:
            found = _DROP.search(change.statement)
            if found is not None:
                self.drops[found.group(1)].append((change.sent_us, change.done_us))
        self.forms = {name: TableForms(schema) for name, schema in schemas.items()}
        self.scopes: dict[tuple[str, str], ScopeWrites] = {}
        self.partition_ops: dict[tuple[str, str], set[int]] = defaultdict(set)
        self.partition_stamped: dict[tuple[str, str], dict[int, set[int]]] = defaultdict(
            lambda: defaultdict(set)
        )
        #: writes to tables the schemas do not have (none in a normal run)
        self.unknown_tables: Counter[str] = Counter()
        for item in issued:
            self.issued[item.number] = item
            for write in item.op.writes:
                self._add(item, write)
        for scope in self.scopes.values():
            scope.server.sort()

    def _add(self, item: IssuedOperation, write: CellWrite) -> None:
        forms = self.forms.get(write.table)
        if forms is None:
            self.unknown_tables[write.table] += 1
            return
        key = forms.key_json(write.key)
        scope = self.scopes.setdefault((write.table, key_text(key)), ScopeWrites())
        partition = (write.table, key_text(forms.partition_of(key)))
        number, op = item.number, item.op
        if number not in scope.ops:
            scope.ops.add(number)
            if op.timestamp is None:
                scope.server.append((item.sent_us, item.done_us, number))
                scope.longest_window_us = max(scope.longest_window_us, item.done_us - item.sent_us)
            else:
                scope.stamped[op.timestamp].add(number)
        self.partition_ops[partition].add(number)
        if op.timestamp is not None:
            self.partition_stamped[partition][op.timestamp].add(number)
        if write.mode == LIVENESS:
            scope.elements[""][ROW_MARKER].add(number)
            return
        if write.column is None:
            return  # a deletion of rows: no element
        if write.mode == DELTA:
            scope.deltas[write.column].extend([write.value] * item.attempts)
            scope.elements[write.column][INCREMENT].add(number)
            return
        t = forms.column_type(write.column)
        if t is None:
            return  # a column the table no longer has nor had: the schema load will say so
        for element in written_elements(t, write.mode, write.value):
            scope.elements[write.column][element].add(number)
        if write.mode == SET and t.multi_cell:
            scope.overwrites.add(number)

    # -- lookups

    def scopes_of(self, table: str, key: dict[str, Any]) -> EventScopes | None:
        """The scopes of a clean-topic key (None: a table the workload never wrote)."""
        forms = self.forms.get(table)
        if forms is None:
            return None
        partition_text = key_text(forms.partition_of(key))
        row_text = key_text(key)
        return EventScopes(
            forms,
            self.scopes.get((table, row_text)),
            self.scopes.get((table, partition_text)) if forms.clustering_columns else None,
            (table, partition_text),
            forms.is_static_only(key),
            (table, row_text),
        )

    def writes_on(self, number: int, scopes: EventScopes) -> list[CellWrite]:
        """What operation ``number`` wrote to the key's row or to its partition."""
        table, row_text = scopes.row_key
        wanted = {row_text, scopes.partition_key[1]}
        return [
            write
            for write in self.issued[number].op.writes
            if write.table == table and key_text(scopes.forms.key_json(write.key)) in wanted
        ]

    def touching(self, scopes: EventScopes) -> set[int]:
        """The operations that may have changed the key's image."""
        if scopes.static_only:
            return set(self.partition_ops.get(scopes.partition_key, ()))
        out: set[int] = set()
        for scope in (scopes.row, scopes.partition):
            if scope is not None:
                out |= scope.ops
        return out

    def applications(self, number: int) -> int:
        """How many change events one operation may cause on one key: one per attempt that Cassandra may
        have applied (every attempt when it picks a new timestamp each time, else one: a retry with the
        same timestamp and values changes nothing visible), plus one expiry per distinct TTL it wrote."""
        item = self.issued[number]
        times = item.attempts if item.op.applies_per_attempt else 1
        ttls = {w.ttl for w in item.op.writes if w.ttl is not None}
        return times * (1 + len(ttls))

    def event_bound(self, scopes: EventScopes) -> int:
        """Events a key may get: its operations', and one per DROP of its table (the delete of a row
        that lived only by the dropped column, or its static-only row appearing)."""
        return sum(self.applications(n) for n in self.touching(scopes)) + len(
            self.drops.get(scopes.row_key[0], ())
        )

    def dropped_at(self, table: str, timestamp: int) -> bool:
        """Whether a DROP on ``table`` may have been stamped ``timestamp`` (Cassandra's clock, kept in
        milliseconds by system_schema: its window widened by SERVER_CLOCK_SLACK_US)."""
        return any(
            sent - SERVER_CLOCK_SLACK_US <= timestamp <= done + SERVER_CLOCK_SLACK_US
            for sent, done in self.drops.get(table, ())
        )

    def stamped_at(self, scopes: EventScopes, timestamp: int) -> set[int]:
        """Operations touching the key with exactly this USING TIMESTAMP."""
        if scopes.static_only:
            return set(self.partition_stamped.get(scopes.partition_key, {}).get(timestamp, ()))
        out: set[int] = set()
        for scope in (scopes.row, scopes.partition):
            if scope is not None:
                out |= scope.stamped.get(timestamp, set())
        return out

    def overwrote_at(self, scopes: EventScopes, timestamp: int) -> set[int]:
        """Operations with this timestamp that overwrote a collection or UDT of the key (their deletion is
        at timestamp - 1)."""
        out: set[int] = set()
        for scope in (scopes.row, scopes.partition):
            if scope is not None:
                out |= scope.stamped.get(timestamp, set()) & scope.overwrites
        return out

    def server_ops_at(self, scopes: EventScopes, timestamp: int) -> set[int]:
        """Operations on the key whose timestamp Cassandra picked and whose send..return window (with
        SERVER_CLOCK_SLACK_US) holds ``timestamp``."""
        out: set[int] = set()
        for scope in (scopes.row, scopes.partition):
            if scope is None or not scope.server:
                continue
            high = bisect.bisect_right(scope.server, (timestamp + SERVER_CLOCK_SLACK_US, 2**63, 2**63))
            low = timestamp - SERVER_CLOCK_SLACK_US - scope.longest_window_us
            for sent, done, number in reversed(scope.server[:high]):
                if sent < low:
                    break
                if sent - SERVER_CLOCK_SLACK_US <= timestamp <= done + SERVER_CLOCK_SLACK_US:
                    out.add(number)
        return out
