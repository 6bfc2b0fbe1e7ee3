"""The range-deletion list: the superseding deletion at every point, in a normal form independent of order."""

from __future__ import annotations

import random

from state.cell_merge import Deletion
from state.range_tombstones import RangeTombstoneList

# positions: bounds end in 0x08 (before) or 0x30 (after); row keys in 0x20, so they never coincide
BOUNDS = [bytes((v, side)) for v in range(0x40, 0x48) for side in (0x08, 0x30)]
PROBES = [bytes((v, 0x20)) for v in range(0x3F, 0x49)]


def random_ranges(rng: random.Random, n: int) -> list[tuple[bytes, bytes, Deletion]]:
    out = []
    for _ in range(n):
        a, b = sorted(rng.sample(BOUNDS, 2))
        out.append((a, b, Deletion(rng.randint(1, 6), rng.randint(1, 3))))
    return out


def brute_force(ranges: list[tuple[bytes, bytes, Deletion]], probe: bytes) -> Deletion | None:
    covering = [d for s, e, d in ranges if s < probe < e]
    return max(covering) if covering else None


def test_any_order_and_repetition_gives_the_same_list() -> None:
    rng = random.Random(11)
    for _ in range(200):
        ranges = random_ranges(rng, rng.randint(1, 8))
        reference = RangeTombstoneList()
        for r in ranges:
            reference.add(*r)
        for probe in PROBES:
            assert reference.covering(probe) == brute_force(ranges, probe)
        for _ in range(3):
            again = RangeTombstoneList()
            shuffled = ranges * rng.randint(1, 2)
            rng.shuffle(shuffled)
            for r in shuffled:
                again.add(*r)
            assert again == reference
        assert not any(reference.add(*r) for r in ranges)  # idempotent: nothing changes


def test_touching_pieces_with_the_same_deletion_join() -> None:
    joined = RangeTombstoneList()
    joined.add(b"\x40\x08", b"\x41\x30", Deletion(5, 1))
    joined.add(b"\x41\x30", b"\x43\x30", Deletion(5, 1))
    whole = RangeTombstoneList()
    whole.add(b"\x40\x08", b"\x43\x30", Deletion(5, 1))
    assert joined == whole and len(joined) == 1


def test_a_higher_deletion_splits_a_lower_one() -> None:
    rts = RangeTombstoneList()
    rts.add(b"\x40\x08", b"\x45\x30", Deletion(5, 1))
    rts.add(b"\x42\x08", b"\x42\x30", Deletion(9, 1))
    assert [d.timestamp for _, _, d in rts] == [5, 9, 5]
    assert rts.covering(b"\x42\x20") == Deletion(9, 1)
    assert rts.covering(b"\x43\x20") == Deletion(5, 1)
    assert rts.covering(b"\x46\x20") is None


def test_partition_deletion_and_purge_drop_pieces() -> None:
    rts = RangeTombstoneList()
    rts.add(b"\x40\x08", b"\x42\x30", Deletion(5, 100))
    rts.add(b"\x43\x08", b"\x44\x30", Deletion(9, 200))
    assert rts.drop_shadowed(Deletion(5, 100))
    assert [d.timestamp for _, _, d in rts] == [9]
    assert not rts.purge(200)
    assert rts.purge(201) and not rts


def test_empty_ranges_are_ignored() -> None:
    rts = RangeTombstoneList()
    assert not rts.add(b"\x42\x30", b"\x42\x08", Deletion(1, 1))
    assert not rts
