"""Events per key against the statements that touched it; no-op and duplicate events counted."""

from __future__ import annotations

from cdc.verify.event_counts import count_events
from cdc.verify.oracle import by_key, chain_problems
from cdc.verify.workload.cell_write import ADD, DELETE, DELTA, LIVENESS, SET, CellWrite
from tests.unit.test_verify_image_audit import (
    BASE,
    HITS,
    INSERT,
    KV,
    PARTITION,
    ROW,
    event,
    image,
    index,
    op,
)

KEY = {"id": 7}
A = image("kv", id=7, name="x")
B = image("kv", id=7, name="x", score=5)


def test_a_clean_history_is_within_bounds_with_nothing_repeated() -> None:
    ledger = index(INSERT, op(CellWrite("kv", KV, "score", SET, 5), ts=BASE + 200))
    events = [event(KEY, None, A, BASE + 100, offset=1), event(KEY, A, B, BASE + 200, offset=2)]
    counts = count_events("kv", by_key(events), ledger)
    assert counts.summary()["keys_over_bound"] == 0
    assert (counts.keys, counts.change_events, counts.noops, counts.duplicates) == (1, 2, [], [])


def test_more_events_than_statements_is_flagged() -> None:
    ledger = index(INSERT)
    events = [event(KEY, None, A, BASE + 100, offset=1), event(KEY, A, B, BASE + 100, offset=2)]
    counts = count_events("kv", by_key(events), ledger)
    assert counts.over_bound == [{"table": "kv", "key": '{"id": 7}', "events": 2, "statements": 1}]


def test_a_ttl_allows_its_expiry_event_and_a_retried_counter_each_attempt() -> None:
    with_ttl = op(
        CellWrite("kv", KV, None, LIVENESS, ttl=5), CellWrite("kv", KV, "name", SET, "x", ttl=5), ts=BASE + 1
    )
    expired = [event(KEY, None, A, BASE + 1, offset=1), event(KEY, A, None, BASE + 9, expired=True, offset=2)]
    assert not count_events("kv", by_key(expired), index(with_ttl)).over_bound
    assert count_events("kv", by_key(expired), index(INSERT)).over_bound

    counter = op(CellWrite("hits", HITS, "n", DELTA, 1), ts=None, kind="counter")
    key = {"page": "p1", "day": 19782}
    one, two = image("hits", **key, n=1), image("hits", **key, n=2)
    twice = [event(key, None, one, 1, offset=1), event(key, one, two, 2, offset=2)]
    assert not count_events("hits", by_key(twice), index(counter, attempts=2)).over_bound
    assert count_events("hits", by_key(twice), index(counter, attempts=1)).over_bound


def test_a_retried_list_append_may_apply_at_each_attempt_a_retried_set_add_once() -> None:
    """Each execution of a list append adds new elements (cell paths the coordinator picks), even under
    one USING TIMESTAMP: a retried one can show twice. A retried set add writes the same cells again."""
    one, two = image("kv", id=7, items=[18]), image("kv", id=7, items=[18, 18])
    twice = [event(KEY, None, one, BASE + 5, offset=1), event(KEY, one, two, BASE + 5, offset=2)]
    append = op(CellWrite("kv", KV, "items", ADD, [18]), ts=BASE + 5, kind="list_append")
    assert not count_events("kv", by_key(twice), index(append, attempts=2)).over_bound
    assert count_events("kv", by_key(twice), index(append, attempts=1)).over_bound
    tags = op(CellWrite("kv", KV, "tags", ADD, {"red"}), ts=BASE + 5, kind="set_add")
    assert count_events("kv", by_key(twice), index(tags, attempts=2)).over_bound


def test_a_no_op_event_is_counted() -> None:
    events = [event(KEY, None, A, BASE + 100, offset=1), event(KEY, A, A, BASE + 100, offset=2)]
    counts = count_events("kv", by_key(events), index(INSERT, INSERT))
    assert counts.noops == ['kv key {"id": 7} at 0@2']


def test_a_change_emitted_twice_is_a_duplicate_even_when_the_chain_holds() -> None:
    """A -> B, B -> A, A -> B again with B's write time: the chain of images is unbroken, yet the last
    event repeats the first change (a batch committed twice would look like this)."""
    ledger = index(INSERT, op(CellWrite("kv", KV, "score", SET, 5), ts=BASE + 200), INSERT, INSERT)
    history = [
        event(KEY, None, A, BASE + 100, offset=1),
        event(KEY, A, B, BASE + 200, offset=2),
        event(KEY, B, A, BASE + 300, offset=3),
        event(KEY, A, B, BASE + 200, offset=4),
    ]
    assert chain_problems(history) == []
    counts = count_events("kv", by_key(history), ledger)
    assert counts.duplicates == ['kv key {"id": 7} at 0@4'] and not counts.noops


def test_the_same_change_from_two_raw_events_is_no_duplicate_from_one_raw_event_twice_it_is() -> None:
    """Under a cell written far in the future (the event's write time is the row's newest cell), A -> B,
    B -> A, A -> B by three statements: the first and last events are alike but for their raw events.
    The same raw event's change twice is a duplicate."""
    ledger = index(INSERT, op(CellWrite("kv", KV, "score", SET, 5), ts=BASE + 200), INSERT, INSERT)
    future = BASE + 10**9
    history = [
        event(KEY, None, A, future, offset=1, raw=("node1", 7, 100)),
        event(KEY, A, B, future, offset=2, raw=("node1", 7, 200)),
        event(KEY, B, A, future, offset=3, raw=("node2", 9, 50)),
        event(KEY, A, B, future, offset=4, raw=("node3", 8, 300)),
    ]
    assert not count_events("kv", by_key(history), ledger).duplicates
    history[3] = event(KEY, A, B, future, offset=4, raw=("node1", 7, 200))
    assert count_events("kv", by_key(history), ledger).duplicates == ['kv key {"id": 7} at 0@4']


def test_a_static_only_row_may_show_the_same_static_cells_again() -> None:
    """The partition's static-only row hides while a clustering row lives and shows again, unchanged,
    when that row goes: the same change twice, legitimately."""
    ledger = index(
        op(CellWrite("wide", PARTITION, "s", SET, ""), ts=BASE + 10),
        op(CellWrite("wide", ROW, None, LIVENESS), ts=BASE + 20),
        op(CellWrite("wide", ROW, None, DELETE), ts=BASE + 30),
    )
    key = {"tenant": "t1", "bucket": 2, "ck1": None, "ck2": None}
    shown = image("wide", **key, s="")
    history = [
        event(key, None, shown, BASE + 10, offset=1),
        event(key, shown, None, BASE + 20, offset=2),
        event(key, None, shown, BASE + 10, offset=4),
    ]
    counts = count_events("wide", by_key(history), ledger)
    assert counts.duplicates == [] and counts.over_bound == []
