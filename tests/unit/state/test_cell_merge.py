"""Reconcile of two versions of one cell, of row livenesses and of deletions (Cassandra's tie-breaks)."""

from __future__ import annotations

import itertools

import pytest

from state.cell_merge import (
    EXPIRED_LIVENESS_TTL,
    NO_DELETION_TIME,
    Cell,
    Deletion,
    Liveness,
    compare_cells,
    liveness_supersedes,
    max_deletion,
    reconcile,
    reconcile_liveness,
)


def live(ts: int, value: bytes) -> Cell:
    return Cell(ts, 0, NO_DELETION_TIME, 0, value)


def expiring(ts: int, value: bytes, expiry: int, ttl: int = 10) -> Cell:
    return Cell(ts, ttl, expiry, 0x02, value)


def tombstone(ts: int, ldt: int) -> Cell:
    return Cell(ts, 0, ldt, 0x01, b"")


# (rule, version a, version b, the one that must win)
RECONCILE = [
    ("higher timestamp wins", live(2, b"\x00"), live(1, b"\xff"), "a"),
    ("higher timestamp wins over a tombstone", live(2, b"x"), tombstone(1, 999), "a"),
    ("tombstone at a higher timestamp wins", tombstone(3, 1), live(2, b"x"), "a"),
    ("equal ts: tombstone beats live", tombstone(5, 1), live(5, b"\xff"), "a"),
    (
        "equal ts: expiring beats live even with a smaller value",
        expiring(5, b"\x00", 100),
        live(5, b"\xff"),
        "a",
    ),
    ("equal ts: tombstone beats expiring", tombstone(5, 1), expiring(5, b"\xff", 100), "a"),
    (
        "equal ts: expiring with the later expiry wins",
        expiring(5, b"\x00", 200),
        expiring(5, b"\xff", 100),
        "a",
    ),
    ("equal ts: tombstone with the later deletion time wins", tombstone(5, 7), tombstone(5, 6), "a"),
    ("equal ts, both live: greater value wins", live(5, b"\x02"), live(5, b"\x01"), "a"),
    ("value comparison is unsigned (0x80 > 0x7f)", live(5, b"\x80"), live(5, b"\x7f"), "a"),
    (
        "value comparison: -1 (0xffffffff) beats 1 as unsigned bytes",
        live(5, b"\xff\xff\xff\xff"),
        live(5, b"\x00\x00\x00\x01"),
        "a",
    ),
    ("value comparison: a longer value with the same prefix wins", live(5, b"ab"), live(5, b"a"), "a"),
    ("equal ts and expiry: greater value wins", expiring(5, b"\x02", 100), expiring(5, b"\x01", 100), "a"),
]


@pytest.mark.parametrize(("rule", "a", "b", "winner"), RECONCILE, ids=[r[0] for r in RECONCILE])
def test_reconcile_rule(rule: str, a: Cell, b: Cell, winner: str) -> None:
    expected = a if winner == "a" else b
    assert reconcile(a, b) is expected
    assert reconcile(b, a) is expected
    assert compare_cells(a, b) == -compare_cells(b, a) != 0


def test_reconcile_is_a_total_order_over_every_pair() -> None:
    cells = [c for _, a, b, _ in RECONCILE for c in (a, b)]
    cells += [Cell(5, 7, 100, 0x02, b"\x02"), Cell(5, 3, 100, 0x02, b"\x02")]  # differ in TTL only
    for a, b, c in itertools.product(cells, repeat=3):
        assert reconcile(reconcile(a, b), c) == reconcile(a, reconcile(b, c))
        assert reconcile(a, b) == reconcile(b, a)
        assert reconcile(a, a) == a


@pytest.mark.parametrize(
    ("cell", "now", "alive"),
    [
        (live(1, b"x"), 10**9, True),
        (tombstone(1, 5), 0, False),
        (expiring(1, b"x", 100), 99, True),
        (expiring(1, b"x", 100), 100, False),  # a tombstone from its local deletion time on
        (expiring(1, b"x", 100), 101, False),
    ],
)
def test_cell_liveness_at_a_time(cell: Cell, now: int, alive: bool) -> None:
    assert cell.is_live(now) is alive


# (rule, a, b, a supersedes b?)
LIVENESS = [
    ("higher timestamp wins", Liveness(2), Liveness(1, 10, 100), True),
    ("equal ts: expiring beats plain", Liveness(5, 10, 100), Liveness(5), True),
    ("equal ts: plain loses to expiring", Liveness(5), Liveness(5, 10, 100), False),
    ("equal ts: later expiry wins", Liveness(5, 10, 200), Liveness(5, 10, 100), True),
    (
        "equal ts: expired marker beats anything",
        Liveness(5, EXPIRED_LIVENESS_TTL, 1),
        Liveness(5, 10, 999),
        True,
    ),
]


@pytest.mark.parametrize(("rule", "a", "b", "wins"), LIVENESS, ids=[r[0] for r in LIVENESS])
def test_liveness_supersedes(rule: str, a: Liveness, b: Liveness, wins: bool) -> None:
    assert liveness_supersedes(a, b) is wins
    assert reconcile_liveness(a, b) == reconcile_liveness(b, a) == (a if wins else b)


def test_liveness_is_live() -> None:
    assert Liveness(1).is_live(10**9)
    assert Liveness(1, 10, 100).is_live(99) and not Liveness(1, 10, 100).is_live(100)
    assert not Liveness(1, EXPIRED_LIVENESS_TTL, 10**9).is_live(0)


def test_deletion_supersedes_by_timestamp_then_local_deletion_time() -> None:
    assert Deletion(5, 1) > Deletion(4, 99)
    assert Deletion(5, 2) > Deletion(5, 1)
    assert max_deletion(Deletion(5, 1), None) == Deletion(5, 1)
    assert max_deletion(Deletion(4, 9), Deletion(5, 1)) == Deletion(5, 1)
    assert Deletion(5, 1).deletes(5) and Deletion(5, 1).deletes(4) and not Deletion(5, 1).deletes(6)
