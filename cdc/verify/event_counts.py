"""How many change events each key got, against how many the clients' statements can explain.

- **Bound**: a key gets at most one event per operation that touched it (per attempt when Cassandra
  picks the timestamp: a retried counter update or LWT can apply twice), plus one per distinct TTL the
  operation wrote (the expiry). More events than that means a change was emitted twice somewhere.
- **No-op events**: ``before == after``: an event for a change nobody can see.
- **Duplicate events**: one raw event's change emitted twice for one key: equal ``before``, ``after``,
  ``op``, write time, expiry flag and raw position (node, segment, offset; none for an expiry). A raw
  event changes a row at most once, so the same change from the same position twice is a batch
  committed twice, even when the key's chain of images stays unbroken. The position is part of it
  because a row can legitimately go through the same change twice: an event's write time is the row's
  newest cell, so under a cell written far in the future, ``items`` set to ``[0]``, removed and set to
  ``[0]`` again by three statements gives two events alike in all but the raw event they came from
  (seen in a 200,000-operation soak). A replica copy merged twice is a no-op event and counts there.
  A partition's static-only row (null clustering columns) shows while the partition has no live
  clustering row and hides while it has one, so the same static cells can appear, with the same write
  time, each time the partition's last row goes; its repeats are left to the chain check
  (oracle.chain_problems).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cdc.verify.json_forms import canonical
from cdc.verify.ledger_index import LedgerIndex
from cdc.verify.oracle import CleanEvent


@dataclass(slots=True)
class EventCounts:
    keys: int = 0
    change_events: int = 0
    over_bound: list[dict[str, Any]] = field(default_factory=list)
    noops: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)

    def summary(self, limit: int = 5) -> dict[str, Any]:
        return {
            "keys": self.keys,
            "change_events": self.change_events,
            "keys_over_bound": len(self.over_bound),
            "noop_events": len(self.noops),
            "duplicate_events": len(self.duplicates),
            "examples": {
                "over_bound": self.over_bound[:limit],
                "noop": self.noops[:limit],
                "duplicate": self.duplicates[:limit],
            },
        }


def count_events(table: str, histories: dict[str, list[CleanEvent]], index: LedgerIndex) -> EventCounts:
    """``histories``: each key's events in offset order (``oracle.by_key``)."""
    counts = EventCounts()
    for key, history in histories.items():
        changes = [e for e in history if e.value is not None]
        if not changes:
            continue
        counts.keys += 1
        counts.change_events += len(changes)
        scopes = index.scopes_of(table, changes[0].key)
        bound = 0 if scopes is None else index.event_bound(scopes)
        if len(changes) > bound:
            counts.over_bound.append(
                {"table": table, "key": key, "events": len(changes), "statements": bound}
            )
        recurs = scopes is not None and scopes.static_only
        seen: set[str] = set()
        for event in changes:
            value = event.value
            assert value is not None
            where = f"{table} key {key} at {event.partition}@{event.offset}"
            if value.get("before") == value.get("after"):
                counts.noops.append(where)
            source = value.get("source") or {}
            signature = canonical(
                [value.get("before"), value.get("after"), value.get("op"), source.get("write_time_us"),
                 bool(source.get("expired")), source.get("node"), source.get("segment_id"),
                 source.get("offset")]
            )  # fmt: skip
            if signature in seen and not recurs:
                counts.duplicates.append(where)
            seen.add(signature)
    return counts
