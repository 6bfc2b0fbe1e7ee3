"""One statement before its timestamp and TTL are chosen, the cells it writes (for the verifier's record of
every write), and the single-value cells it set, remembered so that a later operation can write them again
at exactly the same timestamp."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cdc.verify.workload.cell_write import CellWrite

Key = tuple[tuple[str, Any], ...]
"""Primary-key columns a statement names, with their values, in WHERE order."""


@dataclass(slots=True)
class WrittenCells:
    """Single-value cells a statement set, remembered so a later operation can reuse the timestamp."""

    table: str
    partition: tuple[Any, ...]
    key: Key
    values: dict[str, Any]
    timestamp: int = 0


@dataclass(slots=True)
class DraftStatement:
    """A statement before its USING clause is known: ``head`` + USING ... + ``tail``."""

    kind: str
    table: str
    partition: tuple[Any, ...]
    head: str
    head_params: tuple[Any, ...]
    tail: str = ""
    tail_params: tuple[Any, ...] = ()
    ttl_ok: bool = False
    write: WrittenCells | None = None
    writes: list[CellWrite] = field(default_factory=list)
    """Every cell, row marker and deletion the statement writes (its TTL added when it is rendered)."""

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


def where_clause(key: Key) -> tuple[str, tuple[Any, ...]]:
    return " WHERE " + " AND ".join(f"{name} = %s" for name, _ in key), tuple(v for _, v in key)


def set_clause(values: dict[str, Any]) -> tuple[str, tuple[Any, ...]]:
    return ", ".join(f"{name} = %s" for name in values), tuple(values.values())
