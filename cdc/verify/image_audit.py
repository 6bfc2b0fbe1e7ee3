"""Every image the pipeline emitted, intermediate ones included, explained by what the clients wrote.

The converged state is compared with Cassandra elsewhere; this looks at each change event on the way
there, which SELECT can no longer show. An event is *explained* when:

- **values**: every non-null value in its ``after`` was written by some statement to that row and column
  (a static column: to that partition), element by element for a non-frozen collection or UDT (a set or
  list element, a map entry, a UDT field). A counter's value must be a sum of some of the increments
  issued to it, each at most as often as it was sent: a counter image adds up the shards the worker has
  seen, each a prefix of one node's increments.
- **write time**: ``source.write_time_us`` is the time of the write that made the change, so a statement
  on that row or partition must carry that timestamp (or the next microsecond, when it overwrote a
  collection, whose old cells it deletes at timestamp - 1) and have *made this change*: written a column
  whose value the event changes, in the way the after image shows it (a value or element the image
  shows, a null where the image has none, an element removed, or a value whose TTL had run out by the
  time it was merged, which wins as a null), deleted the row, a range or the
  partition, or, for a created row, written its row marker. A statement whose value the image merely
  still shows does not do: a ``SET col = null`` is stamped with its own time, not with the insert's
  that wrote the other columns. A partition's static-only row comes and goes with every write to the
  partition, so any statement there at that time explains it. When Cassandra picks the timestamp
  (LWT, counters) it must lie in the send..return window of an operation on the key, and the image
  must show a value one of them wrote: a Paxos round that finishes an earlier, unfinished one re-stamps
  that update with its own ballot, so the value and the window may belong to two LWTs of one row.
  Expiry events carry the expiry time, not a write time: only their values are checked. A delete of a
  row that showed a value of a column the run dropped may carry the time of that DROP instead.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from cdc.verify.json_forms import ROW_MARKER, image_elements, written_elements
from cdc.verify.ledger_index import INCREMENT, EventScopes, LedgerIndex, ScopeWrites
from cdc.verify.oracle import CleanEvent
from cdc.verify.workload.cell_write import DELETE, DELTA, FIELD, LIVENESS, REMOVE, SET, CellWrite


@dataclass(slots=True)
class ImageAudit:
    """Explained and unexplained change events of one table (or of a whole run, once added up)."""

    explained: int = 0
    unexplained: int = 0
    examples: list[dict[str, Any]] = field(default_factory=list)

    def add(self, other: ImageAudit, limit: int = 10) -> None:
        self.explained += other.explained
        self.unexplained += other.unexplained
        self.examples.extend(other.examples[: max(0, limit - len(self.examples))])

    def summary(self, limit: int = 5) -> dict[str, Any]:
        return {
            "explained": self.explained,
            "unexplained": self.unexplained,
            "examples": self.examples[:limit],
        }


def audit_images(table: str, events: Iterable[CleanEvent], index: LedgerIndex, limit: int = 10) -> ImageAudit:
    """Each change event of ``table`` (Kafka tombstones aside) checked against the clients' writes."""
    audit = ImageAudit()
    sums = _SubsetSums()
    for event in events:
        if event.value is None:
            continue
        problems = explain(table, event, index, sums)
        if not problems:
            audit.explained += 1
            continue
        audit.unexplained += 1
        if len(audit.examples) < limit:
            audit.examples.append(
                {
                    "table": table,
                    "key": event.key,
                    "at": f"{event.partition}@{event.offset}",
                    "op": event.value.get("op"),
                    "write_time_us": event.value.get("source", {}).get("write_time_us"),
                    "problems": problems[:5],
                }
            )
    return audit


def explain(table: str, event: CleanEvent, index: LedgerIndex, sums: _SubsetSums | None = None) -> list[str]:
    """What in one change event no client write explains (empty: all of it is explained)."""
    assert event.value is not None
    scopes = index.scopes_of(table, event.key)
    if scopes is None:
        return [f"table {table}: the workload never wrote it"]
    value = event.value
    after: dict[str, Any] | None = value.get("after")
    source: dict[str, Any] = value.get("source") or {}
    problems: list[str] = []
    if after is not None:
        for column, shown in after.items():
            if column not in scopes.forms.key_columns and shown is not None:
                problems.extend(_unexplained_value(scopes, column, shown, sums or _SubsetSums()))
    if not source.get("expired"):
        before: dict[str, Any] | None = value.get("before")
        problems.extend(_unexplained_write_time(index, scopes, before, after, source.get("write_time_us")))
    return problems


def _unexplained_value(scopes: EventScopes, column: str, shown: Any, sums: _SubsetSums) -> list[str]:
    t = scopes.forms.column_type(column)
    if t is None:
        return [f"{column}: not a column of the table, then or now"]
    scope = scopes.of_column(column)
    if t.is_counter:
        deltas = scope.deltas.get(column, []) if scope is not None else []
        if sums.reachable(scope, column, deltas, shown):
            return []
        return [f"{column} = {shown}: no sum of the {len(deltas)} increments sent to it"]
    written = scope.elements.get(column, {}) if scope is not None else {}
    missing = [e for e in image_elements(t, shown) if e not in written]
    return [f"{column}: {e} was never written to it" for e in missing[:3]]


def _unexplained_write_time(
    index: LedgerIndex,
    scopes: EventScopes,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    timestamp: int | None,
) -> list[str]:
    if timestamp is None:
        return ["no write time"]
    if after is None and index.dropped_at(scopes.row_key[0], timestamp) and _shows_dropped(scopes, before):
        return []  # a row that lived by a column the run dropped, gone with the DROP
    stamped = index.stamped_at(scopes, timestamp) | index.overwrote_at(scopes, timestamp + 1)
    server = index.server_ops_at(scopes, timestamp)
    if not stamped and not server:
        return [f"write time {timestamp}: no statement on this row or partition has that timestamp"]
    if scopes.static_only and stamped:
        return []
    if any(_made_change(index.writes_on(n, scopes), scopes, before, after) for n in stamped):
        return []
    if server:
        if after is None:
            return []
        if any(index.issued[n].op.server_timestamp for n in _writers_of_shown(scopes, after)):
            return []
    return [
        f"write time {timestamp}: the statements at that time (operations {sorted(stamped | server)[:5]}) "
        "made none of the changes the event shows"
    ]


def _shows_dropped(scopes: EventScopes, before: dict[str, Any] | None) -> bool:
    """Whether an image shows a value in a column the table has dropped (since)."""
    dropped = scopes.forms.schema.dropped_columns
    return before is not None and any(before.get(c) is not None for c in dropped)


def _changed_columns(
    scopes: EventScopes, before: dict[str, Any] | None, after: dict[str, Any] | None
) -> set[str]:
    """The non-key columns whose value the event changes ("" for the row's own existence)."""
    old, new = before or {}, after or {}
    columns = {c for c in (*old, *new) if c not in scopes.forms.key_columns and old.get(c) != new.get(c)}
    if before is None or after is None:
        columns.add("")
    return columns


def _made_change(
    writes: list[CellWrite], scopes: EventScopes, before: dict[str, Any] | None, after: dict[str, Any] | None
) -> bool:
    """Whether one statement's writes to the key's row or partition made (part of) the change."""
    changed = _changed_columns(scopes, before, after)
    for write in writes:
        if write.column is None:
            if write.mode == DELETE and before is not None:
                return True  # a row, range or partition deletion: removes the row or some of its cells
            if write.mode == LIVENESS and before is None:
                return True  # the row marker created the row
            continue
        if write.column in changed and _write_made(write, scopes, before, after):
            return True
    return False


def _write_made(
    write: CellWrite, scopes: EventScopes, before: dict[str, Any] | None, after: dict[str, Any] | None
) -> bool:
    """Whether a write to a column the event changes is what changed it: something it wrote is new in
    the after image, or it removes and the column lost something (for an overwrite of a collection,
    something it did not write itself)."""
    column = write.column or ""
    t = scopes.forms.column_type(column)
    if t is None:
        return False
    if write.mode == DELTA:
        return True
    # multisets: a list can hold an element twice, and an append of a value it holds adds one more
    old = Counter(image_elements(t, (before or {}).get(column)))
    new = Counter(image_elements(t, (after or {}).get(column)))
    written = set(written_elements(t, write.mode, write.value))
    if written & set(new - old):
        return True
    removed = set(old - new)
    if write.mode in (DELETE, REMOVE) or (write.mode == FIELD and write.value[1] is None):
        return bool(removed)
    if write.ttl is not None and removed:
        return True  # merged after its TTL ran out: an expired cell that won, a null
    if write.mode == SET and (write.value is None or t.multi_cell):
        return bool(removed - written)  # a null, or an overwrite's deletion of the elements before it
    return False


def _writers_of_shown(scopes: EventScopes, after: dict[str, Any]) -> set[int]:
    """The operations that wrote a value (or the row marker) the image shows."""
    writers: set[int] = set()
    if scopes.row is not None and not scopes.static_only:
        writers |= scopes.row.elements.get("", {}).get(ROW_MARKER, set())
    for column, shown in after.items():
        if shown is None or column in scopes.forms.key_columns:
            continue
        t = scopes.forms.column_type(column)
        scope = scopes.of_column(column)
        if t is None or scope is None:
            continue
        written = scope.elements.get(column, {})
        if t.is_counter:
            writers |= written.get(INCREMENT, set())
            continue
        for element in image_elements(t, shown):
            writers |= written.get(element, set())
    return writers


class _SubsetSums:
    """The sums a counter can show, per counter cell: every sum of a sub-multiset of its increments, as
    the bits of one integer (bit i: the sum i - offset)."""

    def __init__(self) -> None:
        self._cache: dict[tuple[int, str], tuple[int, int]] = {}

    def reachable(self, scope: ScopeWrites | None, column: str, deltas: list[int], value: Any) -> bool:
        if not isinstance(value, int):
            return False
        cache_key = (id(scope), column)
        if cache_key not in self._cache:
            self._cache[cache_key] = subset_sums(deltas)
        mask, offset = self._cache[cache_key]
        index = value + offset
        return index >= 0 and bool((mask >> index) & 1)


def subset_sums(deltas: list[int]) -> tuple[int, int]:
    """(bit mask, offset) of every sum of a subset of ``deltas``: bit ``s + offset`` is set for sum s."""
    offset = sum(-d for d in deltas if d < 0)
    mask = 1 << offset
    for d in deltas:
        mask |= mask << d if d >= 0 else mask >> -d
    return mask, offset
