"""Acceptance of the commit-log decoder on segments written by real Cassandra 5.0 nodes.

Unit tests check the decoder against the format notes and a handful of upstream fixtures; only segments
written by a real node show whether the notes (and so the decoder) match what Cassandra writes for every
CQL type, every kind of deletion, LWTs, counters, batches, both descriptor versions and every codec.
The workload (commitlog_workload.py) records what each statement must leave in the log; here it is run
on each format, the segments in cdc_raw are decoded up to their durable offsets, and everything decoded
for the workload keyspace is compared with the records.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from cassandra import ConsistencyLevel

from agents.cdc_raw import CdcSegment, list_cdc_segments
from agents.commitlog.compression import Codec
from agents.commitlog.dump_format import render_update
from agents.commitlog.log_reader import SegmentDecoder, decode_segment
from cassandra_model.digest import update_digest_hex
from cassandra_model.partition_update import PartitionUpdate, Row
from cassandra_model.system_schema import SchemaChange, load_schema_from_session
from cassandra_model.table_schema import ClusteringOrder, ColumnKind, SchemaCatalog
from infra.cassandra import CassandraNode
from infra.cql import connect
from tests.conftest import StandaloneFactory
from tests.dump_contract import CELL_KEYS, ROW_KEYS, UPDATE_KEYS
from tests.integration.commitlog_workload import (
    ALL_TYPES,
    UDT_FIELDS,
    WIDE_COLUMNS,
    LogCheck,
    Operation,
    Workload,
)

# ---------------------------------------------------------------------------------------------------------
# formats


@dataclass(frozen=True, slots=True)
class Format:
    """A commit-log format: the descriptor version and codec a node configured by ``yaml`` writes."""

    name: str
    descriptor: int
    codec: Codec | None
    yaml: dict[str, object] = field(default_factory=dict)

    @property
    def direct_io(self) -> bool:
        return self.yaml.get("commitlog_disk_access_mode") == "direct"


def _compressed(class_name: str, descriptor: int) -> dict[str, object]:
    yaml: dict[str, object] = {"commitlog_compression": {"class_name": class_name, "parameters": {}}}
    if descriptor == 8:
        yaml["storage_compatibility_mode"] = "NONE"
    return yaml


NODE1_FORMAT = Format("d7-uncompressed", 7, None)
STANDALONE_FORMATS = [
    Format("d8-uncompressed", 8, None, {"storage_compatibility_mode": "NONE"}),
    Format("d7-lz4", 7, Codec.LZ4, _compressed("LZ4Compressor", 7)),
    Format("d8-zstd", 8, Codec.ZSTD, _compressed("ZstdCompressor", 8)),
    Format("d7-snappy", 7, Codec.SNAPPY, _compressed("SnappyCompressor", 7)),
    Format("d8-deflate", 8, Codec.DEFLATE, _compressed("DeflateCompressor", 8)),
    # 5.0's direct-I/O segments: written in 4 KiB blocks instead of through a preallocated mmap
    Format(
        "d8-direct-io",
        8,
        None,
        {"storage_compatibility_mode": "NONE", "commitlog_disk_access_mode": "direct"},
    ),
]

# ---------------------------------------------------------------------------------------------------------
# reading cdc_raw


@dataclass(slots=True)
class SegmentRead:
    """One segment read from 0 to its durable offset (``limit`` None: COMPLETED, read to its end)."""

    segment: CdcSegment
    limit: int | None
    updates: list[PartitionUpdate]
    decoder: SegmentDecoder


def read_cdc_raw(cdc_raw: Path, catalog: SchemaCatalog) -> list[SegmentRead]:
    """Every segment that has an index, decoded up to the durable offset the index gives."""
    reads = []
    for segment in list_cdc_segments(cdc_raw):
        if segment.index is None:
            continue  # nothing is durable in it yet
        limit = segment.index.read_limit
        updates, decoder = decode_segment(
            segment.path, catalog, limit=limit, completed=segment.index.completed
        )
        reads.append(SegmentRead(segment, limit, updates, decoder))
    return reads


def keyspace_updates(reads: list[SegmentRead], keyspace: str) -> list[PartitionUpdate]:
    return [u for read in reads for u in read.updates if u.keyspace == keyspace]


def mutation_count(updates: list[PartitionUpdate]) -> int:
    return len({(u.segment, u.position) for u in updates})


def read_when_durable(
    cdc_raw: Path, catalog: SchemaCatalog, keyspace: str, mutations: int, timeout_s: float = 30.0
) -> list[SegmentRead]:
    """Poll cdc_raw (no flush) until ``mutations`` of ``keyspace`` are below the durable offsets.

    On timeout the last read is returned: the comparison with the operations then says what is missing.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        reads = read_cdc_raw(cdc_raw, catalog)
        if mutation_count(keyspace_updates(reads, keyspace)) >= mutations or time.monotonic() > deadline:
            return reads
        time.sleep(0.1)


def durable_offsets(cdc_raw: Path) -> dict[str, int]:
    """The idx offset of every live (not COMPLETED) segment: a point to resume an incremental read from."""
    return {
        s.path.name: s.index.offset
        for s in list_cdc_segments(cdc_raw)
        if s.index is not None and not s.index.completed
    }


# ---------------------------------------------------------------------------------------------------------
# one run of the workload


@dataclass(slots=True)
class WorkloadRun:
    """A workload run on one node and what its cdc_raw decoded to afterwards."""

    node: str
    keyspace: str
    operations: list[Operation]
    catalog: SchemaCatalog
    pre_drop_catalog: SchemaCatalog
    offsets: list[dict[str, int]]
    reads: list[SegmentRead]

    @property
    def updates(self) -> list[PartitionUpdate]:
        return keyspace_updates(self.reads, self.keyspace)

    def operation(self, name: str) -> Operation:
        return next(op for op in self.operations if op.name == name)


@contextmanager
def cql_session(node: CassandraNode) -> Iterator[Any]:
    """A session coordinated by ``node`` that writes at consistency ALL (the same as ONE on one node)."""
    cluster = connect(node.spec.address, node.spec.cql_port)
    cluster.profile_manager.default.consistency_level = ConsistencyLevel.ALL
    try:
        yield cluster.connect()
    finally:
        cluster.shutdown()


def run_workload(node: CassandraNode, fmt: Format) -> WorkloadRun:
    """Run the workload, recording the idx offsets between groups, then read cdc_raw once it is durable."""
    cdc_raw = node.spec.cdc_raw
    offsets: list[dict[str, int]] = []
    pre_drop: list[SchemaCatalog] = []

    def checkpoint(_name: str) -> None:
        """Record the offsets, first giving the periodic sync (100 ms) a moment to move them."""
        previous = offsets[-1] if offsets else None
        deadline = time.monotonic() + 1.0
        current = durable_offsets(cdc_raw)
        while current == previous and time.monotonic() < deadline:
            time.sleep(0.05)
            current = durable_offsets(cdc_raw)
        offsets.append(current)

    with cql_session(node) as session:
        # node1 may have grown into the three-node cluster (services kept between runs): replicate to all
        nodes = 1 + len(list(session.execute("SELECT peer FROM system.peers")))
        workload = Workload(session, beyond_2038=fmt.descriptor == 8, replication_factor=nodes)
        operations = workload.run(
            checkpoint, before_drop=lambda: pre_drop.append(load_schema_from_session(session))
        )
        catalog = load_schema_from_session(session)
    expected = sum(1 for op in operations if op.updates)
    reads = read_when_durable(cdc_raw, catalog, workload.keyspace, expected)
    return WorkloadRun(
        node.spec.name,
        workload.keyspace,
        operations,
        catalog,
        pre_drop[0],
        offsets,
        reads,
    )


# ---------------------------------------------------------------------------------------------------------
# what every format must satisfy


def check_segments(reads: list[SegmentRead], fmt: Format) -> None:
    """Every segment read has the configured descriptor and codec, and read without damage or errors."""
    assert reads, "no segment with a _cdc.idx in cdc_raw"
    for read in reads:
        name = read.segment.path.name
        descriptor = read.decoder.descriptor
        assert descriptor is not None, f"{name}: header not readable below its durable offset"
        assert (read.segment.name.version, descriptor.version) == (fmt.descriptor, fmt.descriptor), (
            f"{name}: descriptor version {descriptor.version}, expected {fmt.descriptor}"
        )
        assert descriptor.compression == fmt.codec, (
            f"{name}: codec {descriptor.compression}, expected {fmt.codec}"
        )
        assert not read.decoder.damage, f"{name}: damage reported: {read.decoder.damage}"
        errors = read.decoder.stats.decode_errors
        assert not errors, f"{name}: {len(errors)} decode errors, first: {errors[0]}"


def check_rendering(updates: list[PartitionUpdate]) -> None:
    """render_update gives strict JSON with every required key, and no value failed to decode."""
    for update in updates:
        where = f"{update.table} at {update.segment}@{update.position}"
        doc = json.loads(json.dumps(render_update(update), allow_nan=False))
        assert doc.keys() >= UPDATE_KEYS, f"{where}: keys {sorted(doc)} lack {UPDATE_KEYS - doc.keys()}"
        assert "error" not in doc, f"{where}: {doc['error']}"
        assert doc["keyspace"] == update.keyspace and doc["table_id"] == str(update.table_id), where
        assert doc["digest"] == update_digest_hex(update), where
        assert set(doc["position"]) == {"segment", "offset", "position"}, (
            f"{where}: position {doc['position']}"
        )
        rows = doc["rows"] + ([doc["static"]] if doc["static"] is not None else [])
        for row in rows:
            assert row.keys() >= ROW_KEYS, f"{where}: row keys {sorted(row)}"
            assert isinstance(row["clustering"], list), (
                f"{where}: clustering {row['clustering']!r} is not a list"
            )
            assert "error" not in row, f"{where}: {row['error']}"
            for cell in row["cells"]:
                assert cell.keys() >= CELL_KEYS, f"{where}: cell keys {sorted(cell)}"
                assert "error" not in cell, f"{where}: column {cell['column']}: {cell['error']}"
        for marker in doc["range_tombstones"]:
            assert isinstance(marker["clustering"], list) and "error" not in marker, (
                f"{where}: marker {marker}"
            )


def check_incremental(run: WorkloadRun) -> int:
    """Reading each segment in the increments its idx offset grew by yields the one-read updates.

    Returns how many segments were read in more than one non-empty increment (the property's coverage).
    """
    pieces_read = 0
    for read in run.reads:
        name = read.segment.path.name
        limits = [o[name] for o in run.offsets if name in o and (read.limit is None or o[name] <= read.limit)]
        limits.append(read.limit)
        start = 0
        updates: list[PartitionUpdate] = []
        non_empty = 0
        for i, limit in enumerate(limits):
            last = i == len(limits) - 1
            completed = last and read.segment.index is not None and read.segment.index.completed
            piece, decoder = decode_segment(
                read.segment.path, run.catalog, start=start, limit=limit, completed=completed
            )
            assert not decoder.damage and not decoder.stats.decode_errors, (
                f"{name} read [{start}, {limit}): damage {decoder.damage}, errors {decoder.stats.decode_errors}"
            )
            assert decoder.resume_position >= start, (
                f"{name}: resume position {decoder.resume_position} before start {start}"
            )
            non_empty += bool(piece)
            updates += piece
            start = decoder.resume_position
        pieces_read += non_empty > 1
        whole = [render_update(u) for u in read.updates]
        incremental = [render_update(u) for u in updates]
        assert len(incremental) == len(whole), (
            f"{name}: read at limits {limits} gives {len(incremental)} updates, one read {len(whole)}"
        )
        for i, (a, b) in enumerate(zip(incremental, whole, strict=True)):
            differing = {
                k: (str(a.get(k))[:200], str(b.get(k))[:200])
                for k in a.keys() | b.keys()
                if a.get(k) != b.get(k)
            }
            assert not differing, f"{name}: update {i} differs when read at limits {limits}: {differing}"
    return pieces_read


def check_run(run: WorkloadRun, fmt: Format) -> None:
    check_segments(run.reads, fmt)
    updates = run.updates
    assert updates, f"nothing decoded for keyspace {run.keyspace} on {run.node}"
    LogCheck(run.operations, dropped_visible=False).run(updates)
    holding = sorted({str(u.segment) for u in updates})
    assert len(holding) >= 2, f"the large values did not roll the log over to a new segment: {holding}"
    check_rendering([u for read in run.reads for u in read.updates])
    changes = {c for read in run.reads for c in read.decoder.stats.schema_changes}
    for kind in ("columns", "dropped_columns"):
        assert SchemaChange(run.keyspace, "events", kind) in changes, (
            f"ALTER TABLE events: no {kind} schema change reported; for the keyspace: "
            f"{sorted({c for c in changes if c.keyspace == run.keyspace}, key=str)}"
        )
    # with the schema from before the DROP, the dropped column's cells decode too
    pre_drop = [
        u
        for read in read_cdc_raw_at(run, run.pre_drop_catalog)
        for u in read.updates
        if u.keyspace == run.keyspace
    ]
    LogCheck(run.operations, dropped_visible=True).run(pre_drop)
    assert check_incremental(run) >= 1, f"no segment grew between checkpoints: offsets {run.offsets}"


def read_cdc_raw_at(run: WorkloadRun, catalog: SchemaCatalog) -> list[SegmentRead]:
    """The same segments, at the same limits, decoded with another catalog."""
    out = []
    for read in run.reads:
        completed = read.segment.index is not None and read.segment.index.completed
        updates, decoder = decode_segment(read.segment.path, catalog, limit=read.limit, completed=completed)
        out.append(SegmentRead(read.segment, read.limit, updates, decoder))
    return out


# ---------------------------------------------------------------------------------------------------------
# the tests


@pytest.fixture(scope="module")
def node1_run(cassandra_node: CassandraNode) -> WorkloadRun:
    return run_workload(cassandra_node, NODE1_FORMAT)


def test_workload_on_node1_descriptor_7_uncompressed(node1_run: WorkloadRun) -> None:
    check_run(node1_run, NODE1_FORMAT)


@pytest.mark.parametrize("fmt", STANDALONE_FORMATS, ids=[f.name for f in STANDALONE_FORMATS])
def test_workload_on_other_formats(standalone_cassandra: StandaloneFactory, fmt: Format) -> None:
    with standalone_cassandra(f"segments-{fmt.name}", fmt.yaml) as node:
        run = run_workload(node, fmt)
        check_run(run, fmt)
        if fmt.direct_io:
            # the mode took effect: mmap segments are preallocated to the full segment size
            sizes = {r.segment.path.name: r.segment.path.stat().st_size for r in run.reads}
            full = node.spec.commitlog_segment_size_mb << 20
            assert all(size % 4096 == 0 for size in sizes.values()) and min(sizes.values()) < full, (
                f"segment sizes {sizes} are not those of direct-I/O segments ({full} when preallocated)"
            )


def test_schema_loaded_from_the_node(node1_run: WorkloadRun, cassandra_node: CassandraNode) -> None:
    """Table ids, column kinds, clustering order, cdc flags and dropped columns as system_schema says."""
    ks = node1_run.keyspace
    with cql_session(cassandra_node) as session:
        catalog = load_schema_from_session(session, [ks])
        ids = {
            r.table_name: r.id
            for r in session.execute(
                "SELECT table_name, id FROM system_schema.tables WHERE keyspace_name = %s", [ks]
            )
        }
        types = {
            (r.table_name, r.column_name): r.type
            for r in session.execute(
                "SELECT table_name, column_name, type FROM system_schema.columns WHERE keyspace_name = %s",
                [ks],
            )
        }
    loaded = {t.table: t.table_id for t in catalog.tables() if t.keyspace == ks}
    assert loaded == ids, f"table ids loaded {loaded}, system_schema.tables says {ids}"
    for (table, column), cql in types.items():
        col = catalog.by_name(ks, table).column(column)
        assert col is not None and col.type.cql() == cql, (
            f"{table}.{column}: type {col and col.type.cql()}, system_schema says {cql}"
        )

    cdc = {t.table: t.cdc for t in catalog.tables() if t.keyspace == ks}
    assert cdc == {"all_types": True, "events": True, "counters": True, "plain": False, "wide": True}, (
        f"cdc flags {cdc}"
    )
    counter = {t.table: t.is_counter for t in catalog.tables() if t.keyspace == ks}
    assert counter == {
        "all_types": False,
        "events": False,
        "counters": True,
        "plain": False,
        "wide": False,
    }, f"counter flags {counter}"
    wide = catalog.by_name(ks, "wide")
    assert list(wide.regular_columns) == sorted(name for name, _ in WIDE_COLUMNS), "wide: regular columns"

    all_types = catalog.by_name(ks, "all_types")
    assert [(c.name, c.kind) for c in all_types.partition_key] == [("id", ColumnKind.PARTITION_KEY)]
    for spec in ALL_TYPES:
        col = all_types.regular_columns[spec.name]
        assert col.kind == ColumnKind.REGULAR, f"all_types.{spec.name}: kind {col.kind}"
        assert col.type.multi_cell is (spec.complex is not None), (
            f"all_types.{spec.name} ({spec.cql}): multi_cell {col.type.multi_cell}"
        )
    assert all_types.regular_columns["c_vector"].type.fixed_length == 12, (
        "vector<float, 3> is 12 bytes, unprefixed"
    )
    assert catalog.udts.resolve_udt(ks, "address").field_names == UDT_FIELDS

    events = catalog.by_name(ks, "events")
    keys = [(c.name, c.kind, c.position, c.type.cql()) for c in events.partition_key]
    assert keys == [
        ("tenant", ColumnKind.PARTITION_KEY, 0, "text"),
        ("bucket", ColumnKind.PARTITION_KEY, 1, "int"),
    ], keys
    clustering = [(c.name, c.position, c.clustering_order, c.type.cql()) for c in events.clustering]
    assert clustering == [("ck1", 0, ClusteringOrder.ASC, "int"), ("ck2", 1, ClusteringOrder.DESC, "text")], (
        clustering
    )
    assert {n: c.kind for n, c in events.static_columns.items()} == {"s": ColumnKind.STATIC}
    assert sorted(events.regular_columns) == ["n", "v"], (
        f"events regular columns {sorted(events.regular_columns)}"
    )

    # ALTER TABLE events DROP extra: recorded with its type and the time of the drop (ms precision)
    assert sorted(events.dropped_columns) == ["extra"], (
        f"events dropped columns {sorted(events.dropped_columns)}"
    )
    dropped = events.dropped_columns["extra"]
    drop = node1_run.operation("drop column extra")
    assert dropped.type.cql() == "text" and dropped.kind == ColumnKind.REGULAR, dropped
    low, high = int(drop.started * 1e6) - 1000, int(drop.finished * 1e6) + 1000
    assert low <= dropped.dropped_time <= high, (
        f"dropped_time {dropped.dropped_time} outside the ALTER's window {low}..{high}"
    )
    assert events.header_column("extra").is_dropped


def test_dropped_column_cells_written_before_the_drop(node1_run: WorkloadRun) -> None:
    """§8: a dropped column's cells decode with its dropped type; those older than the drop are discarded."""
    ks = node1_run.keyspace
    dropped_at = node1_run.catalog.by_name(ks, "events").dropped_time("extra")
    older = node1_run.operation("events insert into the added column").updates[0].rows[0]
    newer = (
        node1_run.operation("events update of the added column, timestamped after the drop")
        .updates[0]
        .rows[0]
    )
    old_ts = next(c.timestamp for c in older.cells if c.column == "extra")
    new_ts = newer.cells[0].timestamp
    assert old_ts is not None and new_ts is not None and dropped_at is not None
    assert old_ts <= dropped_at < new_ts, (
        f"the writes at {old_ts} and {new_ts} do not straddle the drop {dropped_at}"
    )

    def rows_of(reads: list[SegmentRead]) -> dict[tuple[Any, ...], Row]:
        rows: dict[tuple[Any, ...], Row] = {}
        for update in keyspace_updates(reads, ks):
            if update.table == "events" and update.partition_key_values() == ("acme", 3):
                rows.update((row.clustering, row) for row in update.rows)
        assert sorted(rows) == [older.clustering, newer.clustering], f"rows of ('acme', 3): {sorted(rows)}"
        return rows

    def extra(row: Row) -> list[tuple[Any, int, bool]]:
        return [(c.value, c.timestamp, c.column.is_dropped) for c in row.cells if c.column.name == "extra"]

    after = rows_of(node1_run.reads)
    assert sorted(c.column.name for c in after[older.clustering].cells) == ["v"], (
        f"with the schema after the drop, the older row holds {extra(after[older.clustering])}"
    )
    assert after[older.clustering].timestamp == old_ts, "the row's liveness must survive the discarded cell"
    assert extra(after[newer.clustering]) == [("from the future", new_ts, True)], (
        f"with the schema after the drop, the newer cell decodes as {extra(after[newer.clustering])}"
    )
    assert after[newer.clustering].cells[0].column.type.cql() == "text"
    before = rows_of(read_cdc_raw_at(node1_run, node1_run.pre_drop_catalog))
    assert extra(before[older.clustering]) == [("soon dropped", old_ts, False)], (
        f"with the schema before the drop, the older cell decodes as {extra(before[older.clustering])}"
    )
    assert extra(before[newer.clustering]) == [("from the future", new_ts, False)]


def test_unknown_tables_are_counted_never_raised(node1_run: WorkloadRun) -> None:
    """Without ``plain`` and ``counters`` in the catalog their mutations are skipped whole and counted.

    The batch's mutation also held an all_types update: Cassandra skips the whole mutation too (§8).
    """
    ks = node1_run.keyspace
    missing = {name: node1_run.catalog.by_name(ks, name).table_id for name in ("plain", "counters")}
    catalog = SchemaCatalog()
    catalog.merge(node1_run.catalog)
    for table_id in missing.values():
        catalog.remove(table_id)
    reads = read_cdc_raw_at(node1_run, catalog)
    counted = sum((read.decoder.stats.unknown_tables for read in reads), start=Counter())
    expected = {
        name: sum(1 for op in node1_run.operations if any(u.table == name for u in op.updates))
        for name in missing
    }
    assert {name: counted[table_id] for name, table_id in missing.items()} == expected, (
        f"unknown-table counts {dict(counted)}, expected per table {expected}"
    )
    assert all(not read.decoder.stats.decode_errors for read in reads)
    kept = [op for op in node1_run.operations if not any(u.table in missing for u in op.updates)]
    LogCheck(kept, dropped_visible=False).run(keyspace_updates(reads, ks))


@pytest.mark.cluster
def test_replica_copies_have_one_digest(cassandra_cluster: list[CassandraNode]) -> None:
    """RF=3 at consistency ALL: each write is decoded once per node, with the same digest on every node."""
    ks = f"rs3_{uuid.uuid4().hex[:10]}"
    with cql_session(cassandra_cluster[0]) as session:
        session.execute(
            f"CREATE KEYSPACE {ks} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 3}}"
        )
        session.execute(f"CREATE TABLE {ks}.t (id int PRIMARY KEY, v text, n int) WITH cdc = true")
        statements = {
            "insert": session.prepare(f"INSERT INTO {ks}.t (id, v, n) VALUES (?, ?, ?)"),
            "ttl": session.prepare(f"UPDATE {ks}.t USING TTL 3600 SET v = ?, n = ? WHERE id = ?"),
            "delete": session.prepare(f"DELETE FROM {ks}.t WHERE id = ?"),
        }
        for statement in statements.values():
            statement.consistency_level = ConsistencyLevel.ALL
        for i in range(50):
            # inserts, expiring cells and row deletions: their deletion times are the coordinator's
            if i % 10 == 7:
                session.execute(statements["ttl"], (f"ttl-{i}", i, i))
            elif i % 10 == 9:
                session.execute(statements["delete"], (i,))
            else:
                session.execute(statements["insert"], (i, f"v-{i}", i))
        catalog = load_schema_from_session(session)

    digests: dict[str, dict[int, str]] = {}
    for node in cassandra_cluster:
        reads = read_when_durable(node.spec.cdc_raw, catalog, ks, 50)
        check_segments(reads, NODE1_FORMAT)
        by_key: dict[int, list[str]] = {}
        for update in keyspace_updates(reads, ks):
            by_key.setdefault(update.partition_key_values()[0], []).append(update_digest_hex(update))
        counts = {k: len(v) for k, v in by_key.items() if len(v) != 1}
        assert sorted(by_key) == list(range(50)) and not counts, (
            f"{node.spec.name}: writes decoded {len(by_key)} keys of 50, keys with several updates {counts}"
        )
        digests[node.spec.name] = {k: v[0] for k, v in by_key.items()}
    first, *others = digests
    for other in others:
        differing = [k for k in range(50) if digests[other][k] != digests[first][k]]
        assert not differing, f"digests of keys {differing} differ between {first} and {other}"
    assert len(set(digests[first].values())) == 50, "different writes share a digest"
