"""Every image explained by the clients' writes: what `cdc verify` flags as invented, and what it accepts.

The ledger is built from real `Operation`s with their `CellWrite`s and the workload's own tables (parsed
from its DDL); the events are clean-topic events as the oracle decodes them.
"""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal
from typing import Any

import pytest
from cassandra.query import ValueSequence
from cassandra.util import Duration

from cassandra_model.ddl_parser import load_schema_from_cql
from cassandra_model.table_schema import TableSchema
from cdc.verify.image_audit import audit_images, explain, subset_sums
from cdc.verify.ledger_index import SERVER_CLOCK_SLACK_US, LedgerIndex
from cdc.verify.oracle import CleanEvent
from cdc.verify.workload.cell_write import ADD, DELETE, DELTA, FIELD, LIVENESS, REMOVE, SET, CellWrite
from cdc.verify.workload.operation import Operation
from cdc.verify.workload.random_values import Udt
from cdc.verify.workload.seeded_workload import Workload
from cdc.verify.write_ledger import WriteLedger

BASE = 1_700_000_000_000_000
NOW_US = 1_800_000_000_000_000


def workload_schemas() -> dict[str, TableSchema]:
    """The workload's tables as they end a run: kv has gained `extra` and lost `note`."""
    ddl = []
    for number, statement in enumerate(Workload("ks", 1, base_time_us=BASE).setup_statements()):
        if statement.startswith("CREATE TABLE"):
            statement = statement.replace(" WITH ", f" WITH ID = {uuid.UUID(int=number + 1)} AND ", 1)
        ddl.append(statement + ";")
    ddl += ["ALTER TABLE ks.kv ADD extra int;", "ALTER TABLE ks.kv DROP note USING TIMESTAMP 1;"]
    return {t.table: t for t in load_schema_from_cql("\n".join(ddl)).tables()}


SCHEMAS = workload_schemas()
KV = (("id", 7),)
PARTITION = (("tenant", "t1"), ("bucket", 2))
ROW = (*PARTITION, ("ck1", 3), ("ck2", "b"))
HITS = (("page", "p1"), ("day", dt.date(2024, 2, 29)))


def op(*writes: CellWrite, ts: int | None, kind: str = "update") -> Operation:
    return Operation(kind, writes[0].table, "-", (), ts, (), None, tuple(writes))


def index(*ops: Operation | tuple[Operation, int, int], attempts: int = 1) -> LedgerIndex:
    """The ledger of ``ops``; an item (op, sent µs, returned µs) gives a server-timestamped op its window."""
    ledger = WriteLedger()
    for item in ops:
        one, sent, done = item if isinstance(item, tuple) else (item, NOW_US, NOW_US + 1000)
        ledger.record(one, sent_us=sent, done_us=done, attempts=attempts, acknowledged=True)
    return LedgerIndex(ledger.issued(), SCHEMAS)


def image(table: str, **values: Any) -> dict[str, Any]:
    row = {c.name: None for c in SCHEMAS[table].all_columns()}
    row.update(values)
    return row


def event(
    key: dict[str, Any],
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    write_time: int | None,
    *,
    expired: bool = False,
    offset: int = 1,
    raw: tuple[str, int, int] | None = None,
) -> CleanEvent:
    """``raw``: the (node, segment id, offset) of the raw event the change came from."""
    op_code = "c" if before is None else "d" if after is None else "u"
    source: dict[str, Any] = {"write_time_us": write_time, "expired": expired}
    if raw is not None:
        source.update(node=raw[0], segment_id=raw[1], offset=raw[2])
    return CleanEvent(0, offset, 0, key, {"before": before, "after": after, "op": op_code, "source": source})


INSERT = op(
    CellWrite("kv", KV, None, LIVENESS),
    CellWrite("kv", KV, "name", SET, "x"),
    CellWrite("kv", KV, "tags", SET, {"red", "blue"}),
    ts=BASE + 100,
    kind="insert",
)


def test_a_written_image_is_explained() -> None:
    after = image("kv", id=7, name="x", tags=["blue", "red"])
    assert explain("kv", event({"id": 7}, None, after, BASE + 100), index(INSERT)) == []


@pytest.mark.parametrize(
    ("after", "write_time", "flagged"),
    [
        (image("kv", id=7, name="y", tags=["blue", "red"]), BASE + 100, 'name: "y" was never written'),
        (image("kv", id=7, name="x", tags=["green", "red"]), BASE + 100, 'tags: "green" was never written'),
        (image("kv", id=7, name="x", score=5), BASE + 100, "score: 5 was never written"),
        (image("kv", id=7, name="x"), BASE + 101, "no statement on this row or partition has that timestamp"),
        (image("kv", id=7, name="x"), None, "no write time"),
    ],
)
def test_an_invented_value_or_write_time_is_flagged(
    after: dict[str, Any], write_time: int | None, flagged: str
) -> None:
    problems = explain("kv", event({"id": 7}, None, after, write_time), index(INSERT))
    assert any(flagged in p for p in problems), problems


def test_a_value_written_to_another_row_does_not_explain() -> None:
    after = image("kv", id=8, name="x")
    assert explain("kv", event({"id": 8}, None, after, BASE + 100), index(INSERT))


def test_the_write_time_must_be_of_a_statement_that_wrote_what_the_image_shows() -> None:
    score_only = op(CellWrite("kv", KV, "score", SET, 5), ts=BASE + 200)
    ledger = index(INSERT, score_only)
    shows_name = image("kv", id=7, name="x")
    problems = explain("kv", event({"id": 7}, None, shows_name, BASE + 200), ledger)
    assert problems == [
        f"write time {BASE + 200}: the statements at that time (operations [1]) made none of the changes "
        "the event shows"
    ]
    shows_both = image("kv", id=7, name="x", score=5)
    assert explain("kv", event({"id": 7}, None, shows_both, BASE + 200), ledger) == []


def test_an_update_carries_the_time_of_the_statement_that_made_it_not_of_a_value_it_still_shows() -> None:
    """SET name = null at +200 after the insert at +100: the image still shows the insert's tags, but
    the change is the null's; stamping it with the insert's time (the row's newest cell) is flagged."""
    set_null = op(CellWrite("kv", KV, "name", SET, None), ts=BASE + 200)
    removal = op(CellWrite("kv", KV, "tags", REMOVE, {"red"}), ts=BASE + 300)
    ledger = index(INSERT, set_null, removal)
    inserted = image("kv", id=7, name="x", tags=["blue", "red"])
    nulled = image("kv", id=7, tags=["blue", "red"])
    assert explain("kv", event({"id": 7}, inserted, nulled, BASE + 200), ledger) == []
    problems = explain("kv", event({"id": 7}, inserted, nulled, BASE + 100), ledger)
    assert problems and "made none of the changes" in problems[0], problems
    removed = image("kv", id=7, tags=["blue"])
    assert explain("kv", event({"id": 7}, nulled, removed, BASE + 300), ledger) == []
    assert explain("kv", event({"id": 7}, nulled, removed, BASE + 100), ledger)
    # a statement at that time that wrote another column, not the one that changed
    assert explain("kv", event({"id": 7}, nulled, removed, BASE + 200), ledger)


def test_a_write_merged_after_its_ttl_ran_out_explains_a_null() -> None:
    """A late copy of ``SET name = ? USING TTL 4``, merged once its TTL had run out, wins over the older
    name as an expired cell: the column goes null, stamped with that write's time."""
    late = op(CellWrite("kv", KV, "name", SET, "gone", ttl=4), ts=BASE + 200)
    ledger = index(INSERT, late)
    inserted = image("kv", id=7, name="x", tags=["blue", "red"])
    assert (
        explain("kv", event({"id": 7}, inserted, image("kv", id=7, tags=["blue", "red"]), BASE + 200), ledger)
        == []
    )
    no_ttl = index(INSERT, op(CellWrite("kv", KV, "name", SET, "gone"), ts=BASE + 200))
    assert explain(
        "kv", event({"id": 7}, inserted, image("kv", id=7, tags=["blue", "red"]), BASE + 200), no_ttl
    )


def test_an_append_of_values_a_list_holds_already_explains_the_longer_list() -> None:
    ledger = index(INSERT, op(CellWrite("kv", KV, "items", ADD, [6, 11]), ts=BASE + 300))
    before = image("kv", id=7, items=[6, 11])
    after = image("kv", id=7, items=[6, 11, 6, 11])
    assert explain("kv", event({"id": 7}, before, after, BASE + 300), ledger) == []
    assert explain("kv", event({"id": 7}, after, before, BASE + 300), ledger)  # an append removes nothing


def test_a_range_deletion_explains_the_rows_it_updates_and_deletes() -> None:
    row_key = {"tenant": "t1", "bucket": 2, "ck1": 3, "ck2": "b"}
    ledger = index(
        op(CellWrite("wide", ROW, None, LIVENESS), CellWrite("wide", ROW, "v1", SET, 7), ts=BASE + 20),
        op(CellWrite("wide", ROW, "v2", SET, "kept"), ts=BASE + 90),
        op(CellWrite("wide", PARTITION, None, DELETE), ts=BASE + 50),
    )
    full = image("wide", **row_key, v1=7, v2="kept")
    assert explain("wide", event(row_key, full, image("wide", **row_key, v2="kept"), BASE + 50), ledger) == []
    assert explain("wide", event(row_key, full, image("wide", **row_key, v2="kept"), BASE + 90), ledger)


def test_collections_and_udt_fields_are_explained_element_by_element() -> None:
    writes = index(
        op(CellWrite("kv", KV, "addr", FIELD, ("city", "Oslo")), ts=BASE + 300),
        op(CellWrite("kv", KV, "attrs", ADD, {"a": 1}), ts=BASE + 301),
        op(CellWrite("kv", KV, "items", ADD, [4, 4]), ts=BASE + 302),
        op(CellWrite("kv", KV, "addr", SET, Udt((("street", "Main"), ("city", "Lyon"), ("zip", 1234),
                                                 ("phones", ("+47 1",))))), ts=BASE + 303),
    )  # fmt: skip
    good = image(
        "kv",
        id=7,
        addr={"street": "Main", "city": "Oslo", "zip": 1234, "phones": ["+47 1"]},
        attrs={"a": 1},
        items=[4, 4],
    )
    assert explain("kv", event({"id": 7}, None, good, BASE + 303), writes) == []
    for column, wrong in (("attrs", {"a": 2}), ("items", [5]), ("addr", {"street": "Elm", "city": None})):
        bad = {**good, column: wrong}
        assert explain("kv", event({"id": 7}, None, bad, BASE + 303), writes), column


def test_every_native_type_in_its_json_form() -> None:
    """The written Python values and the JSON form the clean topics use, spelled out independently."""
    key = (("id", uuid.UUID(int=5)),)
    values = {
        "c_decimal": Decimal("-12.50"),
        "c_timestamp": dt.datetime(2001, 2, 3, 4, 5, 6, 789000, tzinfo=dt.UTC),
        "c_blob": b"\x00\xff",
        "c_inet": "10.0.0.1",
        "c_float": -0.0,
        "c_double": float("inf"),
        "c_varint": 2**100,
        "c_duration": Duration(1, 2, 3),
        "c_tuple": ValueSequence([None, "a", True]),
        "c_date": dt.date(1970, 1, 3),
        "c_map": {"k": {3, 1}},
    }
    ledger = index(op(*(CellWrite("typed", key, c, SET, v) for c, v in values.items()), ts=BASE + 5))
    after = image(
        "typed",
        id=str(uuid.UUID(int=5)),
        c_decimal="-12.50",
        c_timestamp=981173106789,
        c_blob="AP8=",
        c_inet="10.0.0.1",
        c_float=-0.0,
        c_double="Infinity",
        c_varint=str(2**100),
        c_duration={"months": 1, "days": 2, "nanos": 3},
        c_tuple=[None, "a", True],
        c_date=2,
        c_map={"k": [1, 3]},
    )
    assert explain("typed", event({"id": str(uuid.UUID(int=5))}, None, after, BASE + 5), ledger) == []
    wrong = {**after, "c_decimal": "-12.5"}  # another decimal: 1250 scale 2 is not 125 scale 1
    assert explain("typed", event({"id": str(uuid.UUID(int=5))}, None, wrong, BASE + 5), ledger)


def test_static_cells_belong_to_the_partition_and_its_static_only_row() -> None:
    ledger = index(
        op(CellWrite("wide", PARTITION, "s", SET, "hi"), ts=BASE + 10),
        op(CellWrite("wide", ROW, None, LIVENESS), CellWrite("wide", ROW, "v1", SET, 7), ts=BASE + 20),
    )
    row_key = {"tenant": "t1", "bucket": 2, "ck1": 3, "ck2": "b"}
    static_key = {"tenant": "t1", "bucket": 2, "ck1": None, "ck2": None}
    row = image("wide", **row_key, s="hi", v1=7)
    static_only = image("wide", **static_key, s="hi")
    assert explain("wide", event(row_key, None, row, BASE + 20), ledger) == []
    assert explain("wide", event(static_key, None, static_only, BASE + 10), ledger) == []
    # the row's insert hides the static-only row: a delete at the row's write time
    assert explain("wide", event(static_key, static_only, None, BASE + 20), ledger) == []
    other_row = {"tenant": "t1", "bucket": 2, "ck1": 4, "ck2": "b"}
    assert explain(
        "wide", event(other_row, None, image("wide", **other_row, s="hi", v1=7), BASE + 20), ledger
    )


def test_a_delete_is_explained_by_a_statement_at_its_time_or_an_overwrite_just_after() -> None:
    overwrite = op(CellWrite("kv", KV, "tags", SET, set()), ts=BASE + 400)
    deletion = op(CellWrite("wide", PARTITION, None, DELETE), ts=BASE + 500)
    ledger = index(INSERT, overwrite, deletion)
    before = image("kv", id=7, tags=["red"])
    assert explain("kv", event({"id": 7}, before, None, BASE + 399), ledger) == []  # complex deletion at ts-1
    # a statement at that time that only wrote values cannot have deleted the row
    assert explain("kv", event({"id": 7}, before, None, BASE + 100), ledger)
    assert explain("kv", event({"id": 7}, before, None, BASE + 398), ledger)
    row_key = {"tenant": "t1", "bucket": 2, "ck1": 0, "ck2": "a"}  # a range or partition deletion
    assert explain("wide", event(row_key, image("wide", **row_key), None, BASE + 500), ledger) == []
    assert explain("wide", event(row_key, image("wide", **row_key), None, BASE + 499), ledger)


def test_an_expiry_keeps_its_values_checked_but_not_its_time() -> None:
    ledger = index(INSERT)
    after = image("kv", id=7, name="x")
    assert explain("kv", event({"id": 7}, None, after, 1_900_000_000_000_000, expired=True), ledger) == []
    invented = image("kv", id=7, name="z")
    assert explain("kv", event({"id": 7}, None, invented, 1_900_000_000_000_000, expired=True), ledger)


def test_a_dropped_column_in_an_old_image_is_explained_by_its_writes() -> None:
    ledger = index(op(CellWrite("kv", KV, "note", SET, "n"), ts=BASE + 1))
    assert explain("kv", event({"id": 7}, None, {**image("kv", id=7), "note": "n"}, BASE + 1), ledger) == []
    assert explain("kv", event({"id": 7}, None, {**image("kv", id=7), "note": "m"}, BASE + 1), ledger)


def test_counters_show_sums_of_their_increments_within_their_windows() -> None:
    deltas = (5, -2, 20)
    ops = [
        (op(CellWrite("hits", HITS, "n", DELTA, d), ts=None, kind="counter"), NOW_US + i * 10**6, NOW_US + i * 10**6 + 500)
        for i, d in enumerate(deltas)
    ]  # fmt: skip
    ledger = index(*ops)
    key = {"page": "p1", "day": 19782}
    for shown in (5, 3, 23, 18, 25, 0, -2):
        assert explain("hits", event(key, None, image("hits", **key, n=shown), NOW_US + 100), ledger) == []
    for shown in (4, 24, 26, -3):
        assert explain("hits", event(key, None, image("hits", **key, n=shown), NOW_US + 100), ledger), shown
    late = NOW_US + 2 * 10**6 + 500 + SERVER_CLOCK_SLACK_US + 1
    assert explain("hits", event(key, None, image("hits", **key, n=5), late), ledger)


def test_a_retried_counter_update_may_count_twice() -> None:
    ledger = index(op(CellWrite("hits", HITS, "n", DELTA, 5), ts=None, kind="counter"), attempts=2)
    key = {"page": "p1", "day": 19782}
    assert explain("hits", event(key, None, image("hits", **key, n=10), NOW_US), ledger) == []
    assert explain("hits", event(key, None, image("hits", **key, n=15), NOW_US), ledger)


def test_subset_sums() -> None:
    mask, offset = subset_sums([3, -1])
    assert {s for s in range(-offset, 6) if (mask >> (s + offset)) & 1} == {-1, 0, 2, 3}


def test_an_lwt_is_explained_by_its_window_and_a_paxos_repair_by_another_lwts() -> None:
    first = op(CellWrite("kv", KV, None, LIVENESS), CellWrite("kv", KV, "name", SET, "L"),
               CellWrite("kv", KV, "score", SET, 9), ts=None, kind="lwt_insert")  # fmt: skip
    second = op(
        CellWrite("kv", KV, "name", SET, "M"),
        CellWrite("kv", KV, "score", SET, 1),
        ts=None,
        kind="lwt_update",
    )
    ledger = index((first, NOW_US, NOW_US + 1_000_000), (second, NOW_US + 50_000_000, NOW_US + 51_000_000))
    shown = image("kv", id=7, name="L", score=9)
    assert explain("kv", event({"id": 7}, None, shown, NOW_US + 500_000), ledger) == []
    # an unfinished first round finished by the second one's Paxos round, stamped with its ballot
    assert explain("kv", event({"id": 7}, None, shown, NOW_US + 50_500_000), ledger) == []
    assert explain("kv", event({"id": 7}, None, shown, NOW_US + 20_000_000), ledger)
    assert explain(
        "kv", event({"id": 7}, None, image("kv", id=7, name="L", score=2), NOW_US + 500_000), ledger
    )


def test_audit_counts_and_shows_examples() -> None:
    ledger = index(INSERT)
    good = event({"id": 7}, None, image("kv", id=7, name="x"), BASE + 100, offset=1)
    bad = event({"id": 7}, image("kv", id=7, name="x"), image("kv", id=7, name="q"), BASE + 100, offset=2)
    tombstone = CleanEvent(0, 3, 0, {"id": 7}, None)
    audit = audit_images("kv", [good, bad, tombstone], ledger)
    assert (audit.explained, audit.unexplained) == (1, 1)
    assert audit.examples[0]["at"] == "0@2" and "name" in audit.examples[0]["problems"][0]
    assert audit_images("kv", [good, tombstone], ledger).unexplained == 0


def test_a_row_that_lived_by_a_dropped_column_is_deleted_at_the_drops_time() -> None:
    key = (("id", 51),)
    ledger = WriteLedger()
    ledger.record(op(CellWrite("kv", key, "note", SET, "n"), ts=BASE + 7), sent_us=NOW_US, done_us=NOW_US + 10,
                  attempts=1, acknowledged=True)  # fmt: skip
    drop_sent = NOW_US + 60_000_000
    ledger.record_schema_change("ALTER TABLE ks.kv DROP note", sent_us=drop_sent, done_us=drop_sent + 300_000)
    index = LedgerIndex(ledger.issued(), SCHEMAS, ledger.schema_changes())
    before = {**image("kv", id=51), "note": "n"}
    dropped_ms = (drop_sent + 150_000) // 1000 * 1000  # system_schema keeps milliseconds
    assert explain("kv", event({"id": 51}, before, None, dropped_ms), index) == []
    assert explain("kv", event({"id": 51}, before, None, drop_sent - 10_000_000), index)
    assert explain("kv", event({"id": 51}, image("kv", id=51, name="x"), None, dropped_ms), index)
    scopes = index.scopes_of("kv", {"id": 51})
    assert scopes is not None and index.event_bound(scopes) == 2  # its create, and the drop's delete
