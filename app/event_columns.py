"""Whether a raw event needs a newer table schema than the worker has: it writes a column the schema lacks.

``ALTER TABLE ... ADD c`` reaches the worker twice: as a new schema on the schema topic (published by an
agent when it sees the change), and as the cells of c in raw events. Nothing orders the two, so the cells
can come first. Merged against the old schema they would be stored but hidden from images (the merge
keeps cells of columns it does not know), and no change event would follow when the schema arrives: the
write would be lost to the clean topic. The batch loop therefore asks, per raw event, which column names
its schema cannot place, and waits for a schema that can.

A column is placed when the schema has it (static or regular), or when it was dropped and the cell is
from before the drop (data Cassandra hides too). A cell of a dropped column written after the drop
belongs to a column added again under that name: it needs the newer schema as much as a new column does.
"""

from __future__ import annotations

from typing import Any

from cassandra_model.table_schema import TableSchema

#: a dropped time before every write: a name that was never dropped
_NEVER = -(2**63)


class EventColumns:
    """The columns one schema version places, to check raw events against it (one set lookup per cell)."""

    __slots__ = ("dropped", "names", "schema")

    def __init__(self, schema: TableSchema) -> None:
        self.schema = schema
        self.names = frozenset(schema.static_columns) | frozenset(schema.regular_columns)
        #: when each dropped column that is not back was dropped (µs)
        self.dropped = {n: d.dropped_time for n, d in schema.dropped_columns.items() if n not in self.names}

    def unplaced(self, event: dict[str, Any]) -> list[str]:
        """Names of the columns the raw event writes (cells, collection deletions) that the schema cannot
        place, sorted; empty when the schema is recent enough for the event."""
        names, dropped = self.names, self.dropped
        missing: set[str] = set()
        static = event["static_row"]
        for row in event["rows"] if static is None else [static, *event["rows"]]:
            for cell in row["cells"]:
                name = cell["column"]
                if name not in names and cell["timestamp"] > dropped.get(name, _NEVER):
                    missing.add(name)
            for deletion in row["complex_deletions"]:
                name = deletion["column"]
                if name not in names and deletion["deletion"]["timestamp"] > dropped.get(name, _NEVER):
                    missing.add(name)
        return sorted(missing) if missing else []


_CHECKS: dict[int, EventColumns] = {}


def unplaced_columns(event: dict[str, Any], schema: TableSchema) -> list[str]:
    """``EventColumns(schema).unplaced(event)``, with the check of each schema object kept."""
    check = _CHECKS.get(id(schema))
    if check is None or check.schema is not schema:
        if len(_CHECKS) > 4096:
            _CHECKS.clear()
        check = _CHECKS[id(schema)] = EventColumns(schema)
    return check.unplaced(event)
