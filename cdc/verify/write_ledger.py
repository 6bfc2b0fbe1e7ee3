"""What the clients issued: every operation with when it was sent, how often and whether it was acknowledged.

The workload knows what each operation writes (``Operation.writes``) and, for most, the write timestamp
(USING TIMESTAMP). Where Cassandra picks the timestamp (the Paxos ballot of an LWT, the time a counter
update is applied) only the clients' clocks bound it: from the first attempt's send to the last attempt's
return. Every attempt is counted, since a timed-out attempt may be applied as well as its retry.

An operation that failed is kept: a write that timed out may have been applied, so its values may
legitimately reach the clean topic.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from cdc.verify.workload.operation import Operation


@dataclass(slots=True, frozen=True)
class IssuedOperation:
    number: int
    op: Operation
    sent_us: int
    """Wall clock (µs) when the first attempt was sent."""
    done_us: int
    """Wall clock (µs) when the last attempt returned."""
    attempts: int
    acknowledged: bool


@dataclass(slots=True, frozen=True)
class SchemaChange:
    """A schema statement the run made between phases, with its send..return window (µs): a DROP makes
    the rows that lived only by the dropped column disappear, and their deletes carry its time, which
    Cassandra picks within that window."""

    statement: str
    sent_us: int
    done_us: int


@dataclass(slots=True)
class WriteLedger:
    """Filled by the client threads as they go; read once they are done."""

    _issued: list[IssuedOperation] = field(default_factory=list)
    _schema_changes: list[SchemaChange] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def record_schema_change(self, statement: str, *, sent_us: int, done_us: int) -> None:
        with self._lock:
            self._schema_changes.append(SchemaChange(statement, sent_us, done_us))

    def schema_changes(self) -> list[SchemaChange]:
        with self._lock:
            return list(self._schema_changes)

    def record(self, op: Operation, *, sent_us: int, done_us: int, attempts: int, acknowledged: bool) -> None:
        with self._lock:
            number = len(self._issued)
            self._issued.append(IssuedOperation(number, op, sent_us, done_us, attempts, acknowledged))

    def issued(self) -> list[IssuedOperation]:
        with self._lock:
            return list(self._issued)

    def at_consistency(self, level: str) -> int:
        """How many issued operations were sent at ``level``."""
        with self._lock:
            return sum(1 for item in self._issued if item.op.consistency == level)
