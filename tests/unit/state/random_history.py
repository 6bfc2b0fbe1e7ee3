"""Random histories of writes, deletes and TTLs over a small key space of table ``ks.prop``."""

from __future__ import annotations

import random
from typing import Any

from testkit.event_builder import (
    NOW,
    AddElements,
    DeleteColumns,
    DeletePartition,
    DeleteRange,
    DeleteRow,
    EventBuilder,
    Operation,
    RemoveElements,
    Write,
)
from tests.unit.state.support import table

SCHEMA = table("prop")  # clustering (c1 int DESC, c2 text ASC), static s, v1 int, v2 text, l, st, m
C1 = [0, 1, 2, 3]
C2 = ["", "a", "b"]


def random_op(rng: random.Random) -> Operation:
    ts = rng.randint(1, 12)  # few timestamps: many ties
    ttl = rng.choice([0, 0, 0, 5, 20])
    ck = (rng.choice(C1), rng.choice(C2))
    kind = rng.random()
    if kind < 0.40:
        values: dict[str, Any] = {}
        for name, make in [
            ("v1", lambda: rng.choice([None, -1, 0, 1, 2])),
            ("v2", lambda: rng.choice([None, "", "x", "y"])),
            ("s", lambda: rng.choice([None, 1, 2])),
            ("l", lambda: rng.choice([None, [], [1], [2, 3]])),
            ("st", lambda: rng.choice([None, set(), {"a"}, {"a", "b"}])),
            ("m", lambda: rng.choice([None, {}, {1: "x"}, {1: "y", 2: "z"}])),
        ]:
            if rng.random() < 0.4:
                values[name] = make()
        insert = rng.random() < 0.5
        return Write(1, ck, values, ts=ts, ttl=ttl, insert=insert)
    if kind < 0.55:
        column = rng.choice(["l", "st", "m", "s"])
        elements = {
            "l": [rng.randint(0, 3)],
            "st": {rng.choice("abc")},
            "m": {rng.randint(1, 3): "e"},
            "s": None,
        }
        if column == "s":
            return Write(1, (), {"s": rng.randint(1, 3)}, ts=ts, ttl=ttl)
        return AddElements(1, ck, column, elements[column], ts=ts, ttl=ttl)
    if kind < 0.62:
        column = rng.choice(["st", "m"])
        return RemoveElements(
            1, ck, column, [rng.choice("abc")] if column == "st" else [rng.randint(1, 3)], ts=ts
        )
    if kind < 0.72:
        return DeleteColumns(
            1, ck, tuple(rng.sample(["v1", "v2", "l", "st", "m", "s"], rng.randint(1, 2))), ts=ts
        )
    if kind < 0.82:
        return DeleteRow(1, ck, ts=ts)
    if kind < 0.97:
        prefix = () if rng.random() < 0.6 else (rng.choice(C1),)
        values_for = C1 if not prefix else C2
        low = rng.choice([None, *values_for])
        high = rng.choice([None, *values_for])
        return DeleteRange(1, prefix, low, high, rng.random() < 0.5, rng.random() < 0.5, ts=ts)
    return DeletePartition(1, ts=ts)


def random_history(seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    builder = EventBuilder(SCHEMA)
    return [builder.event(random_op(rng), now=NOW + rng.randint(0, 10)) for _ in range(rng.randint(1, 30))]
