"""Two normalized JSON-form rows of one table compared column by column, and the tally of a whole table.

Rows arrive through ``pipeline.lake_schema.normalize_json_form`` from any side (Cassandra, a lake table,
replayed images, a clean topic's ``after``), which makes equal values compare equal (CQL floats at their
32-bit value, JSON-text columns parsed, NaN and infinities as strings).

``TableDiff`` is the per-table result of reconcile and of ``replay --compare``: counts, the columns that
differed and a capped list of example keys (the smallest ones, so a report does not depend on how Spark
split the work). ``expected`` is the reference side (Cassandra, or the replayed images), ``actual`` the side
being checked (the lake, or the workers' clean topics).
"""

from __future__ import annotations

from bisect import insort
from dataclasses import dataclass, field
from typing import Any

from cassandra_model.table_schema import TableSchema

#: lake bookkeeping columns, never part of a comparison
META_PREFIX = "_cdc_"

#: example keys kept per kind of difference
EXAMPLE_LIMIT = 20


def differing_columns(schema: TableSchema, expected: dict[str, Any], actual: dict[str, Any]) -> list[str]:
    """The table's columns whose values differ between two normalized rows (``_cdc_*`` columns and
    columns the table no longer has are ignored; a column absent from a row is null)."""
    out = []
    for column in schema.all_columns():
        name = column.name
        if name.startswith(META_PREFIX):
            continue
        if expected.get(name) != actual.get(name):
            out.append(name)
    return out


def _by_key(item: dict[str, Any]) -> str:
    return item["key"]


def _keep_smallest(items: list[Any], limit: int, sort_key: Any = None) -> list[Any]:
    return sorted(items, key=sort_key)[:limit]


def _insert(items: list[Any], item: Any, limit: int, sort_key: Any = None) -> None:
    """Keep ``items`` the ``limit`` smallest seen, in order."""
    if len(items) >= limit and (sort_key(item) if sort_key else item) >= (
        sort_key(items[-1]) if sort_key else items[-1]
    ):
        return
    insort(items, item, key=sort_key)
    del items[limit:]


@dataclass(slots=True)
class TableDiff:
    """Differences of one table, mergeable across Spark partitions (``add`` per key, then ``merge``)."""

    table: str
    expected_rows: int = 0
    actual_rows: int = 0
    missing: int = 0
    extra: int = 0
    different: int = 0
    skipped: int = 0
    columns: dict[str, int] = field(default_factory=dict)
    missing_keys: list[str] = field(default_factory=list)
    extra_keys: list[str] = field(default_factory=list)
    different_keys: list[dict[str, Any]] = field(default_factory=list)
    limit: int = EXAMPLE_LIMIT

    @property
    def clean(self) -> bool:
        return not (self.missing or self.extra or self.different)

    def add(
        self,
        schema: TableSchema,
        key: str,
        expected: dict[str, Any] | None,
        actual: dict[str, Any] | None,
    ) -> None:
        """Tally one key present on one side or both."""
        if expected is not None:
            self.expected_rows += 1
        if actual is not None:
            self.actual_rows += 1
        if actual is None:
            if expected is not None:
                self.missing += 1
                _insert(self.missing_keys, key, self.limit)
            return
        if expected is None:
            self.extra += 1
            _insert(self.extra_keys, key, self.limit)
            return
        names = differing_columns(schema, expected, actual)
        if not names:
            return
        self.different += 1
        for name in names:
            self.columns[name] = self.columns.get(name, 0) + 1
        example = {"key": key, "columns": names}
        _insert(self.different_keys, example, self.limit, _by_key)

    def skip(self, key: str) -> None:
        """A key left out of the comparison (its image is still changing by TTL)."""
        self.skipped += 1

    def merge(self, other: TableDiff) -> TableDiff:
        """Both tallies in one (``other`` is of the same table)."""
        self.expected_rows += other.expected_rows
        self.actual_rows += other.actual_rows
        self.missing += other.missing
        self.extra += other.extra
        self.different += other.different
        self.skipped += other.skipped
        for name, n in other.columns.items():
            self.columns[name] = self.columns.get(name, 0) + n
        self.missing_keys = _keep_smallest(self.missing_keys + other.missing_keys, self.limit)
        self.extra_keys = _keep_smallest(self.extra_keys + other.extra_keys, self.limit)
        self.different_keys = _keep_smallest(self.different_keys + other.different_keys, self.limit, _by_key)
        return self

    def as_dict(self, expected: str = "expected", actual: str = "actual") -> dict[str, Any]:
        """The JSON report of the table, with the two sides named (``cassandra``/``lake``...)."""
        return {
            "table": self.table,
            f"rows_in_{expected}": self.expected_rows,
            f"rows_in_{actual}": self.actual_rows,
            f"missing_in_{actual}": self.missing,
            f"extra_in_{actual}": self.extra,
            "different": self.different,
            "skipped": self.skipped,
            "different_columns": dict(sorted(self.columns.items())),
            "examples": {
                f"missing_in_{actual}": self.missing_keys,
                f"extra_in_{actual}": self.extra_keys,
                "different": self.different_keys,
            },
        }

    def describe(self, expected: str = "expected", actual: str = "actual") -> str:
        """One summary line (and the first few example keys when something differs)."""
        line = (
            f"{self.table}: {self.expected_rows:,} rows in {expected}, {self.actual_rows:,} in {actual}; "
            f"missing in {actual} {self.missing:,}, extra in {actual} {self.extra:,}, "
            f"different {self.different:,}"
        )
        if self.skipped:
            line += f", {self.skipped:,} skipped (expiring by TTL right now)"
        if self.columns:
            line += " (columns: " + ", ".join(f"{n} {c:,}" for n, c in sorted(self.columns.items())) + ")"
        if self.clean:
            return line + ": same"
        shown = [f"\n  missing in {actual}: {k}" for k in self.missing_keys[:3]]
        shown += [f"\n  extra in {actual}: {k}" for k in self.extra_keys[:3]]
        shown += [f"\n  different {d['columns']}: {d['key']}" for d in self.different_keys[:3]]
        return line + "".join(shown)
