"""Late copies on a table with a small gc_grace_seconds: the worker's tombstone floor keeps them harmless.

The worker's copies come late by design (every replica's agent, hints, a redelivery after the digest
horizon), so its state keeps each tombstone and expired cell for max(gc_grace_seconds, tombstone floor),
the floor being at least the digest horizon. With gc_grace_seconds alone (0 is common on TTL tables) a
late copy of an older write met no tombstone and brought the deleted row back with a spurious event.

Each test drives the worker's own path (``BatchDriver``: ChangeProcessor on a real partition store, built
from the worker config's defaults) the way the batch loop does.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.worker import Worker
from runtime.config import CdcConfig, ConfigError, WorkerConfig, load_config
from state.store.partition_store import StoreOptions
from testkit.event_builder import NOW, DeleteRow, EventBuilder, Write
from tests.unit.app.batch_driver import BatchDriver
from tests.unit.app.support import replica_copy
from tests.unit.state.support import table

#: ks.gc with gc_grace_seconds = 0, as TTL tables often have
GC0 = dataclasses.replace(table("gc"), gc_grace_seconds=0)
#: what a worker runs with when its config says nothing about digests or tombstones
DEFAULTS = WorkerConfig(data_directory=Path("unused"))


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[BatchDriver]:
    with BatchDriver(tmp_path / "p0", [GC0]) as driver:
        yield driver


def test_the_default_floor_is_the_digest_horizon_and_the_worker_uses_it(tmp_path: Path) -> None:
    assert DEFAULTS.tombstone_floor == DEFAULTS.digest_horizon_s == 3 * 86400
    settings = WorkerConfig(data_directory=tmp_path, digest_horizon_s=7 * 86400)
    assert settings.tombstone_floor == 7 * 86400

    async def built() -> int:
        return Worker(CdcConfig(worker=settings)).partitions.options.tombstone_floor_s

    assert asyncio.run(built()) == 7 * 86400
    assert StoreOptions(tombstone_floor_s=7 * 86400).gc_grace_seconds(GC0) == 7 * 86400
    assert StoreOptions().gc_grace_seconds(table("gc")) == 100, "without a floor: the table's own"


def _load(tmp_path: Path, text: str, environ: dict[str, str] | None = None) -> WorkerConfig:
    path = tmp_path / "cdc.yaml"
    path.write_text("worker:\n  data_directory: /w\n" + text)
    worker = load_config(path, environ=environ or {}).worker
    assert worker is not None
    return worker


def test_a_floor_below_the_digest_horizon_needs_to_be_allowed_explicitly(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"worker\.tombstone_floor_s: 3600 s is below worker\.digest_horizon_s"
    ):
        _load(tmp_path, "  tombstone_floor_s: 3600\n")
    with pytest.raises(
        ConfigError, match=r"below worker\.digest_horizon_s \(7200 s\).*CDC__WORKER__TOMBSTONE"
    ):
        _load(tmp_path, "  digest_horizon_s: 7200\n", {"CDC__WORKER__TOMBSTONE_FLOOR_S": "3600"})
    allowed = _load(tmp_path, "  tombstone_floor_s: 3600\n  allow_short_tombstone_floor: true\n")
    assert allowed.tombstone_floor == 3600
    assert _load(tmp_path, "  tombstone_floor_s: 864000\n").tombstone_floor == 864000
    assert _load(tmp_path, "  digest_horizon_s: 60\n").tombstone_floor == 60


def test_a_late_first_copy_of_an_older_write_does_not_bring_a_deleted_row_back(worker: BatchDriver) -> None:
    node1, node2 = EventBuilder(GC0, node="n1"), EventBuilder(GC0, node="n2")
    assert worker.changes(NOW, node1.event(Write(1, (1,), {"v": 1}, ts=10, insert=True))) == [
        ("c", {"pk": 1, "ck": 1, "v": 1})
    ]
    assert [op for op, _ in worker.changes(NOW, node1.event(DeleteRow(1, (1,), ts=20)))] == ["d"]
    # an hour later (gc_grace_seconds = 0 passed long ago) node 2's hint delivers an update older than
    # the delete, which no other replica logged: its first copy, a digest never seen
    late = node2.event(Write(1, (1,), {"v": 2}, ts=15), now=NOW)
    assert worker.changes(NOW + 3600, late) == [], "a deleted row came back"
    assert worker.store.count_rows() == 1, "the row's tombstone is kept"


def test_a_copy_merged_again_after_its_digest_expired_does_not_bring_a_deleted_row_back(
    worker: BatchDriver,
) -> None:
    horizon = DEFAULTS.digest_horizon_s
    write = EventBuilder(GC0, node="n1").event(Write(1, (1,), {"v": 1}, ts=10, insert=True))
    assert [op for op, _ in worker.changes(NOW, write)] == ["c"]
    delete = EventBuilder(GC0).event(DeleteRow(1, (1,), ts=20), now=NOW + 100)
    assert [op for op, _ in worker.changes(NOW + 100, delete)] == ["d"]
    # node 3 was down for the horizon: its copy is merged again (its digest is forgotten) and must meet
    # the tombstone
    assert worker.changes(NOW + horizon + 50, replica_copy(write, "n3")) == [], "a deleted row came back"
    assert worker.stats.tables["ks.gc"].outcomes["duplicate"] == 0, "the digest was forgotten"
    # once the floor has passed for the tombstone too, the row is gone from the store
    assert worker.changes(NOW + 100 + horizon + 1) == []
    assert worker.store.count_rows() == 0


def test_an_expired_cell_is_kept_so_a_late_older_value_stays_hidden(worker: BatchDriver) -> None:
    node1, node2 = EventBuilder(GC0, node="n1"), EventBuilder(GC0, node="n2")
    assert worker.changes(NOW, node1.event(Write(1, (1,), {"v": 1}, ts=10))) == [
        ("c", {"pk": 1, "ck": 1, "v": 1})
    ]
    assert worker.changes(NOW, node1.event(Write(1, (1,), {"v": 2}, ts=20, ttl=5))) == [
        ("u", {"pk": 1, "ck": 1, "v": 2})
    ]
    assert [op for op, _ in worker.changes(NOW + 5)] == ["d"], "the TTL ran out"
    # the expired cell (ts 20) still beats an older value that arrives late, as in Cassandra
    late = node2.event(Write(1, (1,), {"v": 3}, ts=15))
    assert worker.changes(NOW + 600, late) == [], "an expired value's older predecessor came back"


def test_with_the_floor_at_zero_purges_follow_gc_grace_seconds_alone(tmp_path: Path) -> None:
    """What the worker did before the floor (and what ``allow_short_tombstone_floor`` risks)."""
    settings = WorkerConfig(data_directory=tmp_path, tombstone_floor_s=0, allow_short_tombstone_floor=True)
    with BatchDriver(tmp_path / "p0", [GC0], settings=settings) as worker:
        node1, node2 = EventBuilder(GC0, node="n1"), EventBuilder(GC0, node="n2")
        worker.batch(NOW, node1.event(Write(1, (1,), {"v": 1}, ts=10, insert=True)))
        worker.batch(NOW, node1.event(DeleteRow(1, (1,), ts=20)))
        late = node2.event(Write(1, (1,), {"v": 2}, ts=15))
        assert worker.changes(NOW + 3600, late) == [("c", {"pk": 1, "ck": 1, "v": 2})]
