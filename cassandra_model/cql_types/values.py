"""The Python values of CQL types that the standard library has no exact class for.

``time`` keeps nanoseconds (datetime.time stops at microseconds), ``duration`` keeps its three
independent components, a counter context its shards; ``SerializedValue`` lets a writer give the exact
bytes of a value (an empty value, an unusual encoding) wherever a value is expected.
"""

from __future__ import annotations

import datetime as _dt
import uuid
from dataclasses import dataclass


@dataclass(frozen=True, slots=True, order=True)
class CqlTime:
    """A CQL ``time``: nanoseconds since midnight (datetime.time would lose the last three digits)."""

    nanoseconds: int

    def isoformat(self) -> str:
        seconds, nanos = divmod(self.nanoseconds, 1_000_000_000)
        minutes, second = divmod(seconds, 60)
        hour, minute = divmod(minutes, 60)
        return f"{hour:02d}:{minute:02d}:{second:02d}.{nanos:09d}"

    def to_time(self) -> _dt.time:
        """The nearest datetime.time, truncated to microseconds."""
        micros = self.nanoseconds // 1000
        seconds, micro = divmod(micros, 1_000_000)
        minutes, second = divmod(seconds, 60)
        hour, minute = divmod(minutes, 60)
        return _dt.time(hour, minute, second, micro)


@dataclass(frozen=True, slots=True)
class Duration:
    """A CQL ``duration``: three independent signed components, as Cassandra stores them."""

    months: int
    days: int
    nanoseconds: int


@dataclass(frozen=True, slots=True)
class CounterShard:
    """One shard of a CounterContext: the node's counter id, its logical clock and its running count."""

    counter_id: uuid.UUID
    clock: int
    count: int


@dataclass(frozen=True, slots=True)
class SerializedValue:
    """Exact serialized bytes for a value (an empty value, an unusual encoding): ``CqlType.serialize``
    writes them as they are, at any depth of a collection, tuple or UDT."""

    data: bytes
