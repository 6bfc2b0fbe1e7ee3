"""A full scan of the workers' state: the worker's `/scan` page over a real RocksDB partition store, the
verifier paging through every raw partition, and the phantom only a full scan can find."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.change_processor import ChangeProcessor
from app.rest_api import scan_page
from app.worker_stats import WorkerStats
from cassandra_model.ddl_parser import load_schema_from_cql
from cdc.verify.oracle import compare
from cdc.verify.state_scan import StateScanError, scan_table
from schemas.change_json import JsonChangeCodec
from schemas.driver_rows import key_text
from state.row_image import decode_row, partition_images
from state.store.partition_store import PartitionStore, StoreOptions
from testkit.event_builder import NOW, DeletePartition, EventBuilder, Write
from tests.unit.state.support import table

KV = table("kv")  # pk int, ck int, v int, w text, s int static, ...


@pytest.fixture
def store(tmp_path: Path) -> Iterator[PartitionStore]:
    with PartitionStore(tmp_path / "p0", 0, StoreOptions(block_cache_bytes=4 << 20)) as opened:
        yield opened


def merge(store: PartitionStore, *ops: Any) -> None:
    """Each operation's raw event merged and committed, as the worker does."""
    processor = ChangeProcessor(
        cluster="c", topic_prefix="clean", codec=JsonChangeCodec(), stats=WorkerStats()
    )
    builder = EventBuilder(KV)
    for op in ops:
        txn = store.transaction()
        steps = processor.process(txn, builder.event(op), KV, NOW * 1000, [])
        for _ in steps:
            pass
        txn.commit(None, store.changelog_offset + len(txn.changelog()))


def fill(store: PartitionStore) -> None:
    merge(
        store,
        *(
            Write(pk, (ck,), {"v": pk * 10 + ck}, ts=10, insert=True)
            for pk in (1, 2, 3, 300)
            for ck in (1, 2)
        ),
        Write(4, (), {"s": 40}, ts=10),  # static cells only: one row with a null clustering column
        Write(5, (1,), {"v": 5}, ts=10, insert=True),
        DeletePartition(5, ts=20),  # a header with a deletion, no visible row
        Write(6, (1,), {"v": 6, "s": 60}, ts=10, insert=True),
    )


def visible(store: PartitionStore) -> dict[str, dict[str, Any]]:
    """Every visible row, from the store's partitions read one by one (what a scan must return)."""
    rows = {}
    for pk in (1, 2, 3, 4, 5, 6, 300):
        partition_key = EventBuilder(KV).partition_key(pk)
        for image in partition_images(store.read_partition(KV.table_id, partition_key), KV, NOW):
            values = json.loads(json.dumps(decode_row(image, KV), default=str))
            rows[key_text({"pk": values["pk"], "ck": values["ck"]})] = values
    return rows


def scan_all(store: PartitionStore, limit: int) -> tuple[list[dict[str, Any]], int]:
    rows: list[dict[str, Any]] = []
    after, pages = None, 0
    while True:
        page = scan_page(store, KV, after, limit, NOW)
        pages += 1
        rows.extend(page["rows"])
        if page["next"] is None:
            return rows, pages
        after = bytes.fromhex(page["next"])


@pytest.mark.parametrize("limit", [1, 2, 3, 100])
def test_pages_hold_every_visible_row_once(store: PartitionStore, limit: int) -> None:
    fill(store)
    rows, pages = scan_all(store, limit)
    keys = [key_text({"pk": r["values"]["pk"], "ck": r["values"]["ck"]}) for r in rows]
    assert len(keys) == len(set(keys)) == 10
    assert set(keys) == set(visible(store))
    assert pages == -(-7 // limit) if limit < 7 else pages == 1  # 7 partitions stored, one of them deleted
    static_only = next(r for r in rows if r["values"]["pk"] == 4)
    assert static_only["values"]["ck"] is None and static_only["cells"]["s"]["writetime"] == 10


def test_an_empty_table_scans_to_nothing(store: PartitionStore) -> None:
    assert scan_page(store, KV, None, 10, NOW) == {
        "keyspace": "ks", "table": "kv", "partitions": 0, "rows": [], "next": None
    }  # fmt: skip


def test_a_row_only_the_state_holds_is_a_phantom(store: PartitionStore) -> None:
    """Cassandra and the clean topic never name key (300, 2): asking the workers for their keys would miss
    it; the scan finds it."""
    fill(store)
    rows, _ = scan_all(store, 2)
    scanned = {key_text({"pk": r["values"]["pk"], "ck": r["values"]["ck"]}): r["values"] for r in rows}
    cassandra = {k: v for k, v in scanned.items() if k != key_text({"pk": 300, "ck": 2})}
    difference = compare(cassandra, scanned)
    assert difference.phantom == [key_text({"pk": 300, "ck": 2})] and not difference.lost
    assert compare(scanned, scanned).clean


class FakeWorker:
    """A worker's REST answers: a 503 first (a partition moving), then pages of one row per partition."""

    def __init__(self, name: str, pages: dict[int, list[dict[str, Any]]]) -> None:
        self.name = name
        self.pages = pages
        self.asked: list[str] = []
        self.refused_once = False

    def get_json(self, path: str, timeout_s: float = 5.0) -> tuple[int, Any]:
        self.asked.append(path)
        if not self.refused_once:
            self.refused_once = True
            return 503, {"error": "raw partition 0 is not ready; retry"}
        query = dict(part.split("=") for part in path.split("?")[1].split("&"))
        page_index = int(query.get("after", "-1")) + 1
        partition_pages = self.pages.get(int(query["partition"]), [[]])
        rows = partition_pages[page_index]
        more = page_index + 1 < len(partition_pages)
        return 200, {"rows": rows, "next": str(page_index) if more else None}


def row(pk: int, ck: int) -> dict[str, Any]:
    return {"values": {"pk": pk, "ck": ck, "v": 1}, "cells": {}}


def test_the_verifier_pages_through_every_raw_partition(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("cdc.verify.state_scan.time.sleep", lambda _s: None)
    worker = FakeWorker("worker-1", {0: [[row(1, 1)], [row(1, 2)]], 2: [[row(2, 1)]]})
    rows, twice = scan_table([worker], KV, 3)  # type: ignore[list-item]
    assert sorted(rows) == sorted(key_text({"pk": pk, "ck": ck}) for pk, ck in ((1, 1), (1, 2), (2, 1)))
    assert twice == []
    assert worker.asked[0] == worker.asked[1] == "/scan/ks/kv?partition=0"
    assert "/scan/ks/kv?partition=0&after=0" in worker.asked


def test_a_row_held_by_two_partitions_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("cdc.verify.state_scan.time.sleep", lambda _s: None)
    worker = FakeWorker("worker-1", {0: [[row(1, 1)]], 1: [[row(1, 1)]]})
    _rows, twice = scan_table([worker], KV, 2)  # type: ignore[list-item]
    assert twice == [key_text({"pk": 1, "ck": 1})]


def test_a_refused_scan_is_an_error() -> None:
    class Refusing:
        name = "worker-1"

        def get_json(self, path: str, timeout_s: float = 5.0) -> tuple[int, Any]:
            return 404, {"error": "table ks.kv is not known to the workers"}

    with pytest.raises(StateScanError, match="404"):
        scan_table([Refusing()], KV, 1)  # type: ignore[list-item]


TEXT_KEYS = load_schema_from_cql(
    "CREATE TABLE ks.t (pk text, ck int, s int static, v int, PRIMARY KEY (pk, ck)) "
    "WITH ID = 00000000-0000-0000-0000-0000000000aa;"
).by_name("ks", "t")


@pytest.mark.parametrize("limit", [1, 2, 5])
def test_keys_of_every_length_from_headers_and_rows_interleave_in_one_order(
    store: PartitionStore, limit: int
) -> None:
    """Partitions with static cells only (a header, no row) and with rows only, keys of several lengths:
    the two runs of stored keys merge in one order, so no page skips or repeats a partition."""
    assert TEXT_KEYS is not None
    processor = ChangeProcessor(
        cluster="c", topic_prefix="clean", codec=JsonChangeCodec(), stats=WorkerStats()
    )
    builder = EventBuilder(TEXT_KEYS)
    keys = ["", "a", "zz", "b", "yyy", "ccc", "x" * 300, "dd"]
    for number, pk in enumerate(keys):
        op = Write(pk, (), {"s": number}, ts=10) if number % 2 else Write(pk, (1,), {"v": number}, ts=10)
        txn = store.transaction()
        for _ in processor.process(txn, builder.event(op), TEXT_KEYS, NOW * 1000, []):
            pass
        txn.commit(None, store.changelog_offset + len(txn.changelog()))
    seen: list[str] = []
    after = None
    while True:
        page = scan_page(store, TEXT_KEYS, after, limit, NOW)
        seen.extend(r["values"]["pk"] for r in page["rows"])
        if page["next"] is None:
            break
        after = bytes.fromhex(page["next"])
    assert sorted(seen) == sorted(keys) and len(seen) == len(keys)
    assert seen == sorted(keys, key=lambda k: (len(k.encode()), k.encode()))
