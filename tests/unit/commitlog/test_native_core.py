"""The native core against the Python decoder, its specification: identical output on every input.

Framing (entries, damage with its scope and message, resume position, stop, the error of a strict read),
decoding (updates field by field, or the same kind of error), digests, raw-event and key bytes, Kafka
partitions, and the agent's batch path (events, positions, accounting), over every real fixture segment
(descriptor versions 5-7, LZ4, Snappy, uncompressed), segments written here with every codec and
descriptor version, the fuzz corpus of damaged segments and random mutations.
"""

from __future__ import annotations

import contextlib
import random
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agents.commitlog.compression import Codec
from agents.commitlog.errors import (
    DECODE_ERRORS,
    CommitLogError,
    UnknownColumnError,
)
from agents.commitlog.log_reader import SegmentDecoder
from agents.commitlog.mutation_decoder import decode_mutation
from agents.commitlog.segment_reader import SegmentReadResult, read_segment
from cassandra_model.ddl_parser import load_schema_from_cql
from cassandra_model.digest import update_digest
from cassandra_model.errors import UnknownTableError
from cassandra_model.partition_update import PartitionUpdate, RangeTombstoneBoundary, Row
from cassandra_model.system_schema import system_schema_tables
from cassandra_model.table_schema import SchemaCatalog
from schemas.raw_event import encode_raw_event, encode_raw_key, raw_event_record, raw_event_write_time
from tests.unit.commitlog.test_mutation_decoder import (
    SCHEMA,
    SYSTEM_DDL,
    Enc,
    _sample_mutations,
    _wide_insert,
)
from tests.unit.commitlog.test_segment_fuzz import _damage, _target
from tests.unit.commitlog.test_segment_reader import (
    CLEAN_FOLDERS,
    DAMAGED_FOLDERS,
    ENCRYPTED_FOLDER,
    bodies,
    build_segment,
    segments,
)
from tests.unit.legacy_fixtures import read_hash_txt, standard1_cql

native_core = pytest.importorskip("agents.commitlog.native_core")
if native_core.cdc_native is None:
    pytest.skip("the native core is not installed (make setup builds it)", allow_module_level=True)
cdc_native = native_core.cdc_native

SEED = 20261127
CLUSTER, NODE, PUBLISHED_AT = "cdc-local", "node1", 1_764_000_000_000
FIXTURE_VERSIONS = {"4.0.11-encrypted": 12, "3.0.29-encrypted": 10, "3.0.13-encrypted": 10}


# -- the same read, both ways ----------------------------------------------------------------------------


def _read(reader: Callable[..., SegmentReadResult], data: bytes | Path, **kwargs: Any) -> tuple[Any, ...]:
    """What a read returned, in comparable form, or the error it raised."""
    try:
        result = reader(data, **kwargs)
    except CommitLogError as exc:
        return ("error", type(exc), str(exc), exc.offset)
    return (
        [(e.segment_id, e.position, e.end, e.data) for e in result.entries],
        [(d.offset, d.position, d.scope, type(d.error), str(d.error)) for d in result.damage],
        result.resume_position,
        result.stop,
        result.descriptor,
    )


def assert_same_read(data: bytes | Path, **kwargs: Any) -> tuple[Any, ...]:
    python = _read(read_segment, data, **kwargs)
    native = _read(native_core.native_read_segment, data, **kwargs)
    assert native == python, f"native framing differs from Python's ({kwargs})"
    return python


@pytest.mark.parametrize("folder", [*CLEAN_FOLDERS, *DAMAGED_FOLDERS, ENCRYPTED_FOLDER])
def test_fixture_segments_frame_identically(legacy_commitlog_dir: Path, folder: str) -> None:
    rng = random.Random(f"{SEED}-{folder}")
    for path in segments(legacy_commitlog_dir / folder):
        for completed in (True, False):
            full = assert_same_read(path, completed=completed)
            assert_same_read(path.read_bytes(), completed=completed, name=path.name)
            if full[0] == "error":
                continue
            # incremental reads from positions the reader returned, with limits anywhere
            start = 0
            for cut in sorted(rng.randint(0, full[2] + 64) for _ in range(6)):
                step = assert_same_read(path, start=start, limit=cut, completed=completed)
                start = step[2]
        assert_same_read(path, completed=True, strict=True)


@pytest.mark.parametrize("codec", [None, *Codec])
@pytest.mark.parametrize("version", [6, 7, 8])
def test_written_segments_frame_identically(codec: Codec | None, version: int) -> None:
    built = build_segment(4242, [bodies(20, seed=i) for i in range(5)], version=version, codec=codec)
    for completed in (True, False):
        assert_same_read(built.data, completed=completed, name=built.name)
        for cut in range(0, len(built.data), max(1, len(built.data) // 40)):
            assert_same_read(built.data[:cut], completed=completed, name=built.name)
            assert_same_read(built.data, limit=cut, completed=completed, name=built.name)


@pytest.mark.parametrize(
    "folder", ["2.2-lz4", "2.2-snappy", "3.0.13-encrypted", "3.0.29-encrypted", "4.0.11-encrypted"]
)
def test_damaged_segments_frame_identically(legacy_commitlog_dir: Path, folder: str) -> None:
    """The fuzz corpus's damage (bit flips, overwrites, hits on sync markers and entry headers)."""
    path = segments(legacy_commitlog_dir / folder)[0]
    target = _target(path.name, path.read_bytes())
    rng = random.Random(f"{SEED}-damage-{folder}")
    for _ in range(20 if folder.startswith("2.2") else 60):  # the 2.2 segments are large: slow in Python
        damaged = _damage(rng, target)
        completed = rng.random() < 0.7
        strict = rng.random() < 0.1
        full = assert_same_read(damaged, completed=completed, strict=strict, name=target.name)
        if full[0] != "error" and not strict:
            cut = rng.randint(0, full[2] + 16)
            step = assert_same_read(damaged, limit=cut, completed=False, name=target.name)
            assert_same_read(damaged, start=step[2], completed=completed, name=target.name)


@pytest.mark.parametrize("codec", [Codec.DEFLATE, Codec.ZSTD, Codec.LZ4, Codec.SNAPPY, None])
def test_damaged_written_segments_frame_identically(codec: Codec | None) -> None:
    built = build_segment(31337, [bodies(15, seed=i) for i in range(8)], codec=codec)
    target = _target(built.name, built.data)
    rng = random.Random(f"{SEED}-written-{codec}")
    for _ in range(60):
        assert_same_read(_damage(rng, target), completed=rng.random() < 0.7, name=built.name)


def test_garbage_frames_identically() -> None:
    from agents.commitlog.descriptor import encode_header

    rng = random.Random(f"{SEED}-garbage")
    header = encode_header(7, 1234)
    for _ in range(300):
        data = header + rng.randbytes(rng.randint(0, 300)) if rng.random() < 0.7 else rng.randbytes(60)
        for completed in (False, True):
            assert_same_read(data, completed=completed, name="CommitLog-7-1234.log")


# -- decoding, digests, raw events -----------------------------------------------------------------------


def _deletion(d: Any) -> tuple[int, int] | None:
    return None if d is None else (d.marked_for_delete_at, d.local_deletion_time)


def _row(row: Row | None) -> tuple[Any, ...] | None:
    if row is None:
        return None
    cells = [
        (c.column.name, c.flags, c.timestamp, c.ttl, c.local_deletion_time, c.path, c.raw) for c in row.cells
    ]
    complex_ = [(d.column.name, _deletion(d.deletion)) for d in row.complex_deletions]
    return (row.clustering_raw, row.timestamp, row.ttl, row.local_expiration_time, _deletion(row.deletion),
            cells, complex_, row.is_static, row.shadowable_deletion)  # fmt: skip


def _update(update: PartitionUpdate) -> tuple[Any, ...]:
    markers = []
    for m in update.range_tombstones:
        if isinstance(m, RangeTombstoneBoundary):
            markers.append(
                (int(m.kind), m.clustering_raw, _deletion(m.end_deletion), _deletion(m.start_deletion))
            )
        else:
            markers.append((int(m.kind), m.clustering_raw, _deletion(m.deletion), None))
    return (update.table_id.bytes, update.partition_key, _deletion(update.partition_deletion),
            _row(update.static_row), [_row(r) for r in update.rows], markers)  # fmt: skip


def _python_records(updates: list[PartitionUpdate], segment_id: int, descriptor_version: int) -> list[Any]:
    records = []
    for update in updates:
        digest = update_digest(update)
        record = raw_event_record(update, cluster=CLUSTER, node=NODE, segment_id=segment_id,
                                  descriptor_version=descriptor_version, digest=digest,
                                  published_at_ms=PUBLISHED_AT)  # fmt: skip
        key = encode_raw_key(update.keyspace, update.table, update.partition_key)
        from aiokafka.partitioner import murmur2

        records.append((key, encode_raw_event(record), raw_event_write_time(record), murmur2(key)))
    return records


def assert_same_decode(data: bytes, catalog: SchemaCatalog, version: int, position: int = 100) -> str:
    """Decode one entry both ways; the outcome ("updates", or the kind of error)."""
    end = position + len(data) + 12
    native_catalog = native_core.NativeCatalog(catalog, native_core.publish_all).current()
    kind, detail, updates, digests, records = cdc_native.decode_entry(
        data, native_catalog, version, (CLUSTER, NODE, 42, 7, position, end, PUBLISHED_AT)
    )
    try:
        expected = decode_mutation(data, catalog, messaging_version=version, segment="s", offset=position)
    except UnknownTableError as exc:
        assert (kind, detail) == ("unknown_table", uuid.UUID(exc.table_id).bytes)
        return kind
    except UnknownColumnError as exc:
        assert (kind, detail) == ("unknown_column", exc.column)
        return kind
    except DECODE_ERRORS:
        assert kind in ("malformed", "out_of_range"), f"Python raised, native says {kind}"
        return "malformed"
    if kind == "out_of_range":
        return kind  # Python keeps such a timestamp as an unbounded int; the entry goes to Python
    # system_schema's updates decode natively too, though the batch reader leaves them to Python
    assert kind in ("updates", "python_table"), f"Python decoded the entry, native says {kind} {detail}"
    for update in expected:
        update.position = end
    assert updates == [_update(u) for u in expected]
    assert digests == [update_digest(u) for u in expected]
    assert records == _python_records(expected, 42, 7)
    return "updates"


def _full_catalog(cfid: str) -> SchemaCatalog:
    catalog = load_schema_from_cql(SYSTEM_DDL + standard1_cql(cfid))
    for table in system_schema_tables():
        catalog.add(table)
    return catalog


@pytest.mark.parametrize("folder", sorted(FIXTURE_VERSIONS))
def test_fixture_entries_decode_identically(legacy_commitlog_dir: Path, folder: str) -> None:
    cfid = read_hash_txt(legacy_commitlog_dir / folder)["cfid"]
    catalogs = [_full_catalog(cfid), load_schema_from_cql(standard1_cql(cfid))]
    outcomes: dict[str, int] = {}
    for path in segments(legacy_commitlog_dir / folder):
        for entry in read_segment(path, completed=True).entries:
            for catalog in catalogs:
                kind = assert_same_decode(entry.data, catalog, FIXTURE_VERSIONS[folder], entry.position)
                outcomes[kind] = outcomes.get(kind, 0) + 1
    assert outcomes["updates"] > 100 and outcomes["unknown_table"] > 0, outcomes


@pytest.mark.parametrize("version", [10, 12, 13, 14])
def test_built_mutations_their_cuts_and_corruptions_decode_identically(version: int) -> None:
    catalog = load_schema_from_cql(SCHEMA)
    samples = [*_sample_mutations(), _wide_insert(Enc(min_ts=2**62, min_ldt=2**31 + 5, min_ttl=7))]
    outcomes: dict[str, int] = {}
    for data in samples:
        assert assert_same_decode(data, catalog, version) == "updates" or version == 14
        for cut in range(len(data)):
            assert_same_decode(data[:cut], catalog, version)
    rng = random.Random(f"{SEED}-corrupt-{version}")
    for _ in range(1500):
        data = bytearray(rng.choice(samples))
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        kind = assert_same_decode(bytes(data), catalog, version)
        outcomes[kind] = outcomes.get(kind, 0) + 1
    assert len(outcomes) >= 2, outcomes


def test_murmur2_is_the_producers() -> None:
    from aiokafka.partitioner import murmur2

    rng = random.Random(SEED)
    for size in range(80):
        data = rng.randbytes(size)
        assert cdc_native.murmur2(data) == murmur2(data)


# -- the agent's batch path ------------------------------------------------------------------------------


def _python_batches(data: bytes, name: str, catalog: SchemaCatalog, **kwargs: Any) -> tuple[Any, ...]:
    decoder = SegmentDecoder(data, catalog, name=name, **kwargs)
    events = []
    with decoder:
        desc = decoder.descriptor
        for update in decoder:
            for key, value, _, hashed in _python_records([update], desc.segment_id, desc.version):
                events.append((key, value, update.position, (hashed & 0x7FFFFFFF) % 12))
    return events, _decoder_state(decoder)


def _decoder_state(decoder: SegmentDecoder) -> tuple[Any, ...]:
    s = decoder.stats
    return (decoder.resume_position, decoder.stop, decoder.finished,
            [(d.offset, d.position, d.scope, str(d.error)) for d in decoder.damage],
            s.entries, s.updates, dict(s.unknown_tables), [str(e) for e in s.decode_errors],
            s.schema_changes)  # fmt: skip


def _native_batches(data: bytes, name: str, catalog: SchemaCatalog, max_events: int, **kwargs: Any) -> Any:
    native_catalog = native_core.NativeCatalog(catalog, native_core.publish_all)
    decoder = native_core.NativeSegmentDecoder(data, catalog, native_catalog, cluster=CLUSTER, node=NODE,
                                               name=name, **kwargs)  # fmt: skip
    events = []
    with decoder:
        desc = decoder.descriptor
        for item in decoder.batches(
            max_events=max_events, partitions=list(range(12)), clock_ms=lambda: PUBLISHED_AT
        ):
            if isinstance(item, native_core.EventBatch):
                events += zip(item.keys, item.values, item.ends, item.partitions, strict=True)
                continue
            for update in item:
                for key, value, _, hashed in _python_records([update], desc.segment_id, desc.version):
                    events.append((key, value, update.position, (hashed & 0x7FFFFFFF) % 12))
    return events, _decoder_state(decoder)


def assert_same_batches(
    data: bytes, name: str, catalog: SchemaCatalog, max_events: int, **kwargs: Any
) -> int:
    python = _python_batches(data, name, catalog, **kwargs)
    native = _native_batches(data, name, catalog, max_events, **kwargs)
    assert native[1] == python[1], "decoder state differs"
    assert native[0] == python[0], "events differ"
    return len(python[0])


@pytest.mark.parametrize("folder", sorted(FIXTURE_VERSIONS))
def test_fixture_segments_publish_identically(legacy_commitlog_dir: Path, folder: str) -> None:
    cfid = read_hash_txt(legacy_commitlog_dir / folder)["cfid"]
    for path in segments(legacy_commitlog_dir / folder):
        data = path.read_bytes()
        for catalog in (_full_catalog(cfid), load_schema_from_cql(standard1_cql(cfid))):
            for max_events in (1, 7, 2000):
                assert_same_batches(data, path.name, catalog, max_events, completed=True)
            assert_same_batches(data, path.name, catalog, 50, limit=len(data) // 2)


@pytest.mark.parametrize("codec", [None, Codec.LZ4, Codec.ZSTD])
def test_written_and_damaged_segments_publish_identically(codec: Codec | None) -> None:
    catalog = load_schema_from_cql(SCHEMA)
    rng = random.Random(f"{SEED}-batches-{codec}")
    samples = _sample_mutations()
    sections = [[rng.choice(samples) for _ in range(rng.randint(1, 30))] for _ in range(6)]
    sections[2].append(b"\x01" + bytes(40))  # an entry that does not decode
    built = build_segment(777, sections, codec=codec)
    assert assert_same_batches(built.data, built.name, catalog, 25, completed=True) > 50
    target = _target(built.name, built.data)
    for _ in range(40):
        damaged = _damage(rng, target)
        completed = rng.random() < 0.7
        # a header the Python reader refuses: both refuse it (the descriptor is read in Python)
        with contextlib.suppress(CommitLogError):
            assert_same_batches(damaged, built.name, catalog, rng.choice([1, 10, 1000]), completed=completed)


def test_a_decoder_that_met_damaged_compressed_sections_is_freed() -> None:
    """The native reader keeps no decompressor exception: its traceback's frames reach the reader, a cycle
    Python's collector cannot see through native code (the soak found it: 6 GB over a million segments)."""
    import gc
    import weakref

    built = build_segment(555, [bodies(10, seed=i) for i in range(4)], codec=Codec.LZ4)
    sections = assert_same_read(built.data, completed=True, name=built.name)
    damaged = bytearray(built.data)
    damaged[len(damaged) // 2 :] = bytes(len(damaged) - len(damaged) // 2)  # sections that do not decompress
    catalog = load_schema_from_cql(SCHEMA)
    decoder = native_core.NativeSegmentDecoder(bytes(damaged), catalog, native_core.NativeCatalog(catalog, native_core.publish_all),
                                               cluster=CLUSTER, node=NODE, completed=True, name=built.name)  # fmt: skip
    for _ in decoder.batches():
        pass
    assert decoder.damage and sections[0]
    freed = weakref.ref(decoder)
    del decoder
    gc.collect()
    assert freed() is None, "the decoder is kept alive by a reference cycle"
