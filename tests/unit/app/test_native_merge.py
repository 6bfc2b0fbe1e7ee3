"""The native whole-event merge (``cdc_native.TableMerge``) against the Python merge, its specification.

Two workers' partitions (``BatchDriver``) get the same raw events in the same batches, one with the
native merge and one without; every batch must send the same records, byte for byte, and leave the same
stored bytes (rows, headers, due index, digests). The histories mix what the native merge takes (rows of
plain live cells) with everything it must leave to Python (nulls, TTLs, deletions of rows, columns,
ranges and partitions, values the native JSON encoder does not write, rows written in another
spelling of their clustering), so each path also meets the rows the other wrote. A count of the events
the native merge took keeps the tests from passing with it never running.
"""

from __future__ import annotations

import random
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from app.worker_core import AVAILABLE
from app.worker_stats import WorkerStats
from cassandra_model.ddl_parser import load_schema_from_cql
from cassandra_model.table_schema import TableSchema
from schemas.change_event import ChangeEventError
from schemas.change_json import JsonChangeCodec
from schemas.raw_event import (
    SNAPSHOT_NODE,
    SNAPSHOT_SEGMENT_ID,
    decode_raw_event,
    encode_raw_event,
    raw_event_write_time,
)
from testkit.event_builder import (
    NOW,
    DeleteColumns,
    DeletePartition,
    DeleteRange,
    DeleteRow,
    EventBuilder,
    Operation,
    Raw,
    Write,
)
from tests.unit.app.batch_driver import BatchDriver
from tests.unit.state.merge_cases import CASES, Case, case_events
from tests.unit.state.merge_cases import table as case_table

pytestmark = pytest.mark.skipif(AVAILABLE != "native", reason="the native core is not installed (make setup)")

if AVAILABLE == "native":
    from cdc_native import ChangeJson, TableMerge

PLAIN = load_schema_from_cql(
    """CREATE TABLE ks.plain (pk int, c1 int, c2 text, v1 int, v2 text, v3 double, v4 bigint,
        v5 boolean, v6 decimal, v7 uuid, PRIMARY KEY (pk, c1, c2))
        WITH CLUSTERING ORDER BY (c1 DESC, c2 ASC) AND ID = 00000000-0000-0000-0000-000000000201"""
).by_name("ks", "plain")
assert PLAIN is not None


class CountingMerge:
    """A TableMerge that counts the events it took (returned a result for), from prepared rows
    (``taken``) and from raw bytes (``taken_raw``)."""

    taken = 0
    taken_raw = 0

    def __init__(self, *args: Any) -> None:
        self.inner = TableMerge(*args)

    def merge(self, partition_key: bytes, rows: list[Any], *args: Any) -> Any:
        result = self.inner.merge(partition_key, rows, *args)
        if result is not None:
            CountingMerge.taken += 1
            # the event's write time, as the Python function finds it in the parts the native merge takes
            event = {"partition_deletion": None, "static_row": None, "range_tombstones": []}
            assert result[3] == raw_event_write_time({**event, "rows": [record for _, _, record in rows]})
        return result

    def read_plain(self, value: bytes) -> Any:
        return self.inner.read_plain(value)

    def merge_raw(self, value: bytes, *args: Any) -> Any:
        result = self.inner.merge_raw(value, *args)
        if result is not None:
            CountingMerge.taken_raw += 1
            assert result[3] == raw_event_write_time(decode_raw_event(value))
        return result


def counted(stats: WorkerStats) -> dict[str, dict[str, object]]:
    """Per table what the events did, without how they were merged."""
    return {
        table: {k: v for k, v in c.as_dict().items() if k != "merged_natively"}
        for table, c in stats.tables.items()
    }


def natively(stats: WorkerStats) -> int:
    return sum(c.natively for c in stats.tables.values())


class Pair:
    """The same partition of three workers: the native merge of prepared rows, the native merge from
    raw bytes (before the first), and the Python merge."""

    def __init__(self, tmp_path: Path, schemas: list[TableSchema]) -> None:
        codec = JsonChangeCodec(native=ChangeJson)
        self.native = BatchDriver(tmp_path / "native", schemas, codec=codec, table_merge=CountingMerge)
        self.raw = BatchDriver(tmp_path / "raw", schemas, codec=codec, table_merge=CountingMerge, raw=True)
        self.python = BatchDriver(tmp_path / "python", schemas, codec=JsonChangeCodec(native=ChangeJson))
        CountingMerge.taken = CountingMerge.taken_raw = 0
        #: events the native merge took in the first and in the second worker
        self.taken_native = self.taken_raw = 0

    def batch(self, now_s: int, *events: dict[str, Any]) -> None:
        taken = CountingMerge.taken
        native = self.native.batch(now_s, *events)
        self.taken_native += CountingMerge.taken - taken
        taken, taken_raw = CountingMerge.taken, CountingMerge.taken_raw
        raw = self.raw.batch(now_s, *events)
        self.taken_raw += CountingMerge.taken - taken + CountingMerge.taken_raw - taken_raw
        python = self.python.batch(now_s, *events)
        expected = [(r.topic, r.key, r.value) for r in python]
        assert [(r.topic, r.key, r.value) for r in native] == expected
        assert [(r.topic, r.key, r.value) for r in raw] == expected
        assert counted(self.native.stats) == counted(self.python.stats) == counted(self.raw.stats)
        assert natively(self.native.stats) == self.taken_native
        # from raw bytes or else prepared rows, the native merge takes the same events
        assert natively(self.raw.stats) == self.taken_raw == self.taken_native
        assert natively(self.python.stats) == 0

    def assert_same_store(self) -> None:
        expected = list(self.python.store.db.items())
        assert list(self.native.store.db.items()) == expected
        assert list(self.raw.store.db.items()) == expected

    def close(self) -> None:
        for driver in (self.native, self.raw, self.python):
            driver.store.close()


def random_value(rng: random.Random, column: str) -> Any:
    makers = {
        "v1": lambda: rng.choice([-1, 0, 1, 2, 2**31 - 1]),
        "v2": lambda: rng.choice(["", "x", "y", 'é\n"q"', "\u2028"]),
        "v3": lambda: rng.choice([0.0, -0.0, 1.5, 1e300, float("nan"), float("inf")]),
        "v4": lambda: rng.choice([0, -(2**63), 2**63 - 1, 7]),
        "v5": lambda: rng.choice([True, False]),
        "v6": lambda: rng.choice(
            [Decimal("1.25"), Decimal("-0.0"), Decimal("1E+3"), Decimal("12345678901234567890.5")]
        ),
        "v7": lambda: uuid.UUID(int=rng.choice([0, 1, 2**128 - 1])),
    }
    roll = rng.random()
    if roll < 0.08:
        return None  # a null: a tombstone cell, for Python
    if roll < 0.13:
        return Raw(b"")  # an empty value
    return makers[column]()


def random_op(rng: random.Random, now: int) -> Operation:
    ts = now * 10 + rng.randint(0, 6)  # few timestamps per second: many ties
    key = rng.randint(0, 7)
    ck = (rng.randint(0, 3), rng.choice(["", "a", "b"]))
    columns = ["v1", "v2", "v3", "v4", "v5", "v6", "v7"]
    kind = rng.random()
    if kind < 0.75:
        chosen = rng.sample(columns, rng.randint(0 if kind < 0.05 else 1, len(columns)))
        ttl = rng.choice([0] * 9 + [3])
        return Write(
            key, ck, {c: random_value(rng, c) for c in chosen}, ts=ts, ttl=ttl, insert=rng.random() < 0.5
        )
    if kind < 0.83:
        return DeleteColumns(key, ck, tuple(rng.sample(columns, 2)), ts=ts)
    if kind < 0.91:
        return DeleteRow(key, ck, ts=ts)
    if kind < 0.96:
        low, high = sorted(rng.sample(range(4), 2))
        return DeleteRange(key, (), low, high, ts=ts)
    return DeletePartition(key, ts=ts)


@pytest.mark.parametrize("seed", range(40))
def test_random_histories_give_the_same_records_and_stored_bytes(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    builder = EventBuilder(PLAIN)
    pair = Pair(tmp_path, [PLAIN])
    try:
        now = NOW
        for _ in range(12):
            events = [builder.event(random_op(rng, now), now=now) for _ in range(rng.randint(1, 12))]
            events += rng.sample(events, min(2, len(events)))  # replica copies
            pair.batch(now, *events)
            now += rng.choice([0, 1, 2, 5])  # TTLs of 3 s expire between some batches
        pair.batch(now + 10)
        pair.assert_same_store()
    finally:
        pair.close()
    assert CountingMerge.taken > 0 and CountingMerge.taken_raw > 0


def test_the_native_merge_takes_the_common_insert_and_update(tmp_path: Path) -> None:
    """Inserts of new rows and updates of rows it wrote: every event native, the same bytes."""
    builder = EventBuilder(PLAIN)
    pair = Pair(tmp_path, [PLAIN])
    try:
        events = [
            builder.event(
                Write(1, (i, "r"), {"v1": i, "v2": f"row {i}", "v6": Decimal("2.50")}, ts=10 + i, insert=True)
            )
            for i in range(5)
        ]
        events += [builder.event(Write(1, (i, "r"), {"v1": i + 100}, ts=100 + i)) for i in range(3)]
        events += [builder.event(Write(1, (0, "r"), {"v1": 5}, ts=5))]  # older: loses, no change ("late")
        events += [builder.event(Write(1, (1, "r"), {"v1": 101}, ts=102))]  # the same value, later: noop
        pair.batch(NOW, *events)
        pair.assert_same_store()
        counts = pair.native.stats.tables["ks.plain"].as_dict()
        assert (counts["applied"], counts["late"], counts["noops"]) == (8, 1, 1)
        assert counts["emitted_by_op"] == {"c": 5, "u": 3}
        assert (
            counts["merged_natively"] == 10 and pair.native.stats.document()["total"]["merged_natively"] == 10
        )
        assert b'cdc_worker_native_merges_total{table="ks.plain"} 10.0' in pair.native.stats.prometheus()
        assert pair.python.stats.tables["ks.plain"].as_dict()["merged_natively"] == 0
    finally:
        pair.close()
    assert CountingMerge.taken == CountingMerge.taken_raw == 10


def test_equal_timestamps_keep_the_greater_value(tmp_path: Path) -> None:
    builder = EventBuilder(PLAIN)
    pair = Pair(tmp_path, [PLAIN])
    try:
        for values in [{"v2": "b"}, {"v2": "a"}, {"v2": "c"}, {"v2": "a", "v1": 1}]:
            pair.batch(NOW, builder.event(Write(1, (1, "k"), values, ts=50)))
        pair.assert_same_store()
    finally:
        pair.close()
    assert CountingMerge.taken == CountingMerge.taken_raw == 4


def test_a_value_the_native_encoder_refuses_goes_to_python_which_names_it(tmp_path: Path) -> None:
    """Text that is not UTF-8: the native merge leaves the event (nothing written), Python's encoder
    raises the error the batch loop dead-letters the event with."""
    builder = EventBuilder(PLAIN)
    pair = Pair(tmp_path, [PLAIN])
    try:
        bad = builder.event(Write(1, (1, "k"), {"v2": Raw(b"\xff\xfe")}, ts=50, insert=True))
        for driver in (pair.native, pair.raw, pair.python):
            with pytest.raises(ChangeEventError, match=r"ks\.plain: a row image does not decode"):
                driver.batch(NOW, bad)
    finally:
        pair.close()
    assert CountingMerge.taken == CountingMerge.taken_raw == 0


def case_pairs(case: Case) -> bool:
    schema = case_table(case.table)
    return not schema.static_columns


@pytest.mark.parametrize("case", [c for c in CASES if case_pairs(c)], ids=lambda c: c.name)
def test_every_merge_case_gives_the_same_records_and_stored_bytes(tmp_path: Path, case: Case) -> None:
    schema = case_table(case.table)
    pair = Pair(tmp_path, [schema])
    try:
        events = case_events(case, schema)
        for event in events:
            pair.batch(NOW, event)
        for at in sorted({*case.reads(), NOW + case.ttl + 1}):
            pair.batch(max(at, NOW))
        pair.assert_same_store()
    finally:
        pair.close()


def test_a_table_with_static_columns_or_dropped_columns_has_no_native_merge(tmp_path: Path) -> None:
    readd, kv = case_table("readd"), case_table("kv")
    driver = BatchDriver(
        tmp_path, [readd, kv], codec=JsonChangeCodec(native=ChangeJson), table_merge=TableMerge
    )
    try:
        assert driver.processor.native_merge(readd) is None
        assert driver.processor.native_merge(kv) is None
        assert driver.processor.native_merge(PLAIN) is not None
    finally:
        driver.store.close()


def test_from_raw_bytes_it_takes_only_plain_events_of_its_own_table(tmp_path: Path) -> None:
    """``read_plain`` (and so ``merge_raw``) leaves every event that is not its table's or not plain,
    odd bytes included: the batch loop then decodes it and goes the usual way, where its columns are
    checked against the schema (a column the schema lacks waits for a newer one)."""
    driver = BatchDriver(tmp_path, [PLAIN], codec=JsonChangeCodec(native=ChangeJson), table_merge=TableMerge)
    wider = load_schema_from_cql(
        f"CREATE TABLE ks.plain (pk int, c1 int, c2 text, v1 int, v2 text, v3 double, v4 bigint, v5 boolean, "
        f"v6 decimal, v7 uuid, v8 int, PRIMARY KEY (pk, c1, c2)) WITH CLUSTERING ORDER BY (c1 DESC, c2 ASC) "
        f"AND ID = {PLAIN.table_id}"
    ).by_name("ks", "plain")
    assert wider is not None
    try:
        merge = driver.processor.native_merge(PLAIN)
        builder = EventBuilder(PLAIN)
        plain = builder.event(Write(1, (1, "k"), {"v1": 1, "v2": "a"}, ts=50, insert=True))
        value = encode_raw_event(plain)
        partition_key, clusterings = merge.read_plain(value)
        assert (partition_key, clusterings) == (
            plain["partition_key"],
            [tuple(plain["rows"][0]["clustering"])],
        )
        left = {
            "another table's id": {**plain, "table_id": str(uuid.uuid4())},
            "a bootstrap read": {
                **plain,
                "source": {**plain["source"], "node": SNAPSHOT_NODE, "segment_id": SNAPSHOT_SEGMENT_ID},
            },
            "a column the schema lacks": EventBuilder(wider).event(Write(1, (1, "k"), {"v8": 1}, ts=50)),
            "a TTL": builder.event(Write(1, (1, "k"), {"v1": 1}, ts=50, ttl=60, insert=True)),
            "a null": builder.event(Write(1, (1, "k"), {"v1": None}, ts=50)),
            "a row deletion": builder.event(DeleteRow(1, (1, "k"), ts=50)),
            "a range deletion": builder.event(DeleteRange(1, (), 0, 2, ts=50)),
            "a partition deletion": builder.event(DeletePartition(1, ts=50)),
        }
        odd = {"bytes cut short": value[:-1], "bytes after the event": value + b"\x00"}
        for why, left_value in [*((w, encode_raw_event(e)) for w, e in left.items()), *odd.items()]:
            assert merge.read_plain(left_value) is None, why
            assert merge.merge_raw(left_value, [], [], [], NOW * 1000) is None, why
    finally:
        driver.store.close()
