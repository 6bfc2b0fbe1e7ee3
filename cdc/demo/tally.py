"""What the demo's workload wrote and what came back: the bookkeeping that matches events to writes."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass(slots=True)
class Row:
    sensor: str
    at: int
    """Epoch milliseconds, as the clean topic and the REST key spell a timestamp."""
    value: float
    tags: set[str]
    deleted: bool = False

    @property
    def key(self) -> tuple[str, int]:
        return (self.sensor, self.at)


@dataclass(slots=True)
class Write:
    """One CQL write, known by the client timestamp it carried (USING TIMESTAMP): the change event's
    `source.write_time_us` names it exactly."""

    op: str
    key: tuple[str, int]
    round_no: int
    with_ttl: bool = False
    acked: float | None = None
    """Wall-clock time Cassandra acknowledged the write; None while in flight."""


@dataclass(slots=True)
class Tally:
    pending: dict[int, Write] = field(default_factory=dict)
    """Writes whose change event has not arrived yet, by write timestamp (µs)."""
    pending_expiries: set[tuple[str, int]] = field(default_factory=set)
    ttl_created: set[tuple[str, int]] = field(default_factory=set)
    ops: Counter[str] = field(default_factory=Counter)
    expired: int = 0
    unexpected: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    shown: Counter[int] = field(default_factory=Counter)
    hidden: Counter[int] = field(default_factory=Counter)

    def waiting(self, round_no: int | None = None) -> int:
        """Events still expected: of one round (its TTL row aside, which may expire first), or all."""
        if round_no is None:
            return len(self.pending) + len(self.pending_expiries)
        return sum(1 for w in self.pending.values() if w.round_no == round_no and not w.with_ttl)

    def percentile(self, q: float) -> float | None:
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(len(ordered) * q))] if ordered else None
