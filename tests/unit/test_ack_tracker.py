"""The committed position only covers entries whose every event Kafka acknowledged."""

from __future__ import annotations

import random

from agents.ack_tracker import AckTracker


def test_out_of_order_acks_commit_the_acknowledged_prefix_only() -> None:
    acks = AckTracker(start=100)
    for end in (150, 200, 250):
        acks.sent(end)
    acks.read_until(250)
    acks.acked(250)
    acks.acked(200)
    assert acks.committed == 100, "the first entry is still in flight"
    acks.acked(150)
    assert acks.committed == 250
    assert acks.in_flight == 0


def test_entry_with_several_updates_waits_for_all() -> None:
    acks = AckTracker(start=0)
    acks.sent(80)
    acks.sent(80)  # a batch: two partition updates in one commit-log entry
    acks.acked(80)
    acks.sent(120)
    acks.acked(120)
    assert acks.committed == 0
    acks.acked(80)
    assert acks.committed == 80, "the entry ending at 120 began, so the one ending at 80 is whole and done"
    acks.read_until(120)
    assert acks.committed == 120


def test_open_last_entry_is_not_committed_before_the_read_ends() -> None:
    """Acks arrive while the reader may still add events to the entry it is on."""
    acks = AckTracker(start=0)
    acks.sent(50)
    acks.acked(50)
    assert acks.committed == 0
    acks.sent(50)
    acks.acked(50)
    acks.read_until(60)
    assert acks.committed == 60, "bytes after the last event (skipped entries) are covered once the read ends"


def test_read_without_events_moves_the_commit() -> None:
    acks = AckTracker(start=10)
    acks.read_until(500)
    assert acks.committed == 500


def test_random_orders_never_commit_past_an_unacknowledged_event() -> None:
    rng = random.Random(7)
    for _ in range(200):
        acks = AckTracker(start=0)
        events = []
        end = 0
        for _ in range(rng.randint(1, 30)):
            end += rng.randint(1, 50)
            for _ in range(rng.randint(1, 3)):
                acks.sent(end)
                events.append(end)
        acks.read_until(end + rng.randint(0, 20))
        rng.shuffle(events)
        pending = sorted(events)
        last = 0
        for e in events:
            acks.acked(e)
            pending.remove(e)
            assert acks.committed >= last, "the committed position moved backwards"
            last = acks.committed
            if pending:
                assert acks.committed < min(pending), "committed past an event still in flight"
        assert acks.in_flight == 0


def test_batches_of_events_track_exactly_as_one_by_one() -> None:
    """sent_many / acked_many (the native core's batches) give the same committed positions as sent / acked."""
    rng = random.Random(11)
    for _ in range(200):
        one, many = AckTracker(start=0), AckTracker(start=0)
        events, end = [], 0
        for _ in range(rng.randint(1, 40)):
            end += rng.randint(1, 50)
            events += [end] * rng.randint(1, 3)
        cut = rng.randint(0, len(events))
        for batch in (events[:cut], events[cut:]):
            for e in batch:
                one.sent(e)
            many.sent_many(batch)
        one.read_until(end + 5)
        many.read_until(end + 5)
        acked = events[:]
        rng.shuffle(acked)
        while acked:
            size = rng.randint(1, 8)
            batch, acked = acked[:size], acked[size:]
            for e in batch:
                one.acked(e)
            many.acked_many(batch)
            assert many.committed == one.committed and many.in_flight == one.in_flight
