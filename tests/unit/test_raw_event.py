"""Raw events carry a partition update losslessly; keys are the same for every replica's copy."""

from __future__ import annotations

import io
import random
from pathlib import Path

import pytest
from fastavro import schemaless_reader, schemaless_writer

from cassandra_model.digest import update_digest
from cassandra_model.partition_update import PartitionUpdate
from schemas import load_avro_schema
from schemas.raw_event import (
    RawEventError,
    decode_raw_event,
    decode_raw_key,
    encode_raw_event,
    encode_raw_key,
    peek_raw_event,
    raw_event_heads,
    raw_event_record,
)
from testkit.event_builder import EventBuilder, Write
from tests.unit.legacy_fixtures import decode_fixture
from tests.unit.state.support import table

try:
    import cdc_native
except ImportError:  # the native core is not installed
    cdc_native = None


@pytest.fixture(scope="module")
def updates(legacy_commitlog_dir: Path) -> list[PartitionUpdate]:
    found, _ = decode_fixture(legacy_commitlog_dir / "4.0.11-encrypted")
    assert found
    return found


def test_event_round_trip_keeps_every_cell(updates: list[PartitionUpdate]) -> None:
    for update in updates:
        record = raw_event_record(update, cluster="c", node="n1", segment_id=7, descriptor_version=7,
                                  digest=update_digest(update), published_at_ms=1)  # fmt: skip
        back = decode_raw_event(encode_raw_event(record))
        assert back["keyspace"] == update.keyspace and back["table"] == update.table
        assert back["table_id"] == str(update.table_id)
        assert back["partition_key"] == update.partition_key
        assert back["digest"] == update_digest(update)
        assert (
            back["source"]["position"] == update.position and back["source"]["entry_offset"] == update.offset
        )
        rows = back["rows"]
        assert len(rows) == len(update.rows)
        for row, original in zip(rows, update.rows, strict=True):
            assert row["clustering"] == list(original.clustering_raw)
            expected_liveness = None if original.timestamp is None else original.timestamp
            assert (row["liveness"] and row["liveness"]["timestamp"]) == expected_liveness
            assert [
                (c["column"], c["timestamp"], c["ttl"], c["local_deletion_time"], c["value"])
                for c in row["cells"]
            ] == [(c.column.name, c.timestamp, c.ttl, c.local_deletion_time, c.raw) for c in original.cells]


def test_events_and_keys_are_standard_avro_as_fastavro_reads_and_writes_them(
    updates: list[PartitionUpdate],
) -> None:
    """The raw topic's bytes are plain Avro of raw_mutation.avsc / raw_key.avsc, whatever library reads
    them: fastavro, an independent implementation, writes the same bytes and reads back the same record."""
    mutation, raw_key = load_avro_schema("raw_mutation"), load_avro_schema("raw_key")
    for update in updates:
        record = raw_event_record(update, cluster="c", node="n1", segment_id=7, descriptor_version=7,
                                  digest=update_digest(update), published_at_ms=1)  # fmt: skip
        data = encode_raw_event(record)
        out = io.BytesIO()
        schemaless_writer(out, mutation, record)
        assert out.getvalue() == data
        assert schemaless_reader(io.BytesIO(data), mutation, None) == decode_raw_event(data)
        key = encode_raw_key(update.keyspace, update.table, update.partition_key)
        assert decode_raw_key(key) == tuple(schemaless_reader(io.BytesIO(key), raw_key, None).values())


def test_key_is_replica_independent_and_round_trips(updates: list[PartitionUpdate]) -> None:
    update = updates[0]
    key = encode_raw_key(update.keyspace, update.table, update.partition_key)
    assert key == encode_raw_key(update.keyspace, update.table, bytes(update.partition_key))
    assert decode_raw_key(key) == (update.keyspace, update.table, update.partition_key)
    other = encode_raw_key(update.keyspace, update.table, update.partition_key + b"x")
    assert other != key


def test_garbage_is_a_clear_error(updates: list[PartitionUpdate]) -> None:
    with pytest.raises(RawEventError, match="raw event does not decode"):
        decode_raw_event(b"\x02\xff\xff")
    record = raw_event_record(updates[0], cluster="c", node="n1", segment_id=7, descriptor_version=7,
                              digest=update_digest(updates[0]), published_at_ms=1)  # fmt: skip
    data = encode_raw_event(record)
    for cut in range(len(data)):  # every truncation is the same clear error, never a crash
        with pytest.raises(RawEventError, match=f"raw event does not decode \\({cut} bytes\\)"):
            decode_raw_event(data[:cut])
    with pytest.raises(RawEventError, match="raw key does not decode"):
        decode_raw_key(b"\x08ab")


def test_peek_reads_keyspace_table_and_digest_without_decoding_the_body() -> None:
    """The hand-read head agrees with the full decode, and a cut event is a RawEventError."""
    schema = table("kv")
    event = EventBuilder(schema).event(Write(key=7, clustering=(1,), values={"w": "x"}, ts=5))
    event["keyspace"], event["table"] = "ks_é", "t" * 300
    event["source"] = {**event["source"], "cluster": "c" * 70, "segment_id": 2**62, "entry_offset": -3,
                       "position": 2**31, "published_at_ms": 1_790_000_000_000}  # fmt: skip
    data = encode_raw_event(event)
    head = peek_raw_event(data)
    decoded = decode_raw_event(data)
    assert (head.keyspace, head.table, head.digest) == (
        decoded["keyspace"],
        decoded["table"],
        decoded["digest"],
    )
    with pytest.raises(RawEventError):
        peek_raw_event(data[: len(data) // 3])


def _event_bytes(rng: random.Random, n: int) -> bytes:
    schema = table("kv")
    event = EventBuilder(schema).event(
        Write(key=n, clustering=(n,), values={"w": "x" * rng.randrange(200)}, ts=5 + n)
    )
    event["keyspace"] = rng.choice(["ks", "ks_é", "k" * rng.randrange(1, 200)])
    event["table"] = rng.choice(["kv", "t" * rng.randrange(1, 300)])
    event["source"] = {**event["source"], "cluster": "c" * rng.randrange(200), "node": "n" * rng.randrange(90),
                       "segment_id": rng.randrange(-(2**63), 2**63), "entry_offset": rng.randrange(-9, 2**40),
                       "published_at_ms": rng.randrange(2**45)}  # fmt: skip
    event["partition_key"] = rng.randbytes(rng.randrange(300))
    return encode_raw_event(event)


def test_the_heads_of_a_batch_are_what_peek_reads() -> None:
    """raw_event_heads (the worker's batch form of peek_raw_event): the table and digest of each value,
    None exactly where peek_raw_event raises (cut, corrupted or not bytes at all)."""
    rng = random.Random(11)
    values: list[bytes | None] = []
    for n in range(300):
        data = _event_bytes(rng, n)
        values += [data, data[: rng.randrange(len(data))]]
        corrupted = bytearray(data)
        for _ in range(rng.randrange(1, 4)):
            corrupted[rng.randrange(min(len(data), 120))] = rng.randrange(256)
        values.append(bytes(corrupted))
    values += [None, b"", b"\x02", b"\x02\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"]
    expected: list[tuple[str, bytes] | None] = []
    for value in values:
        try:
            head = peek_raw_event(value)  # type: ignore[arg-type]
        except (RawEventError, TypeError):
            expected.append(None)
        else:
            expected.append((f"{head.keyspace}.{head.table}", head.digest))
    assert sum(head is None for head in expected) > 200  # most cut and corrupted ones do not decode
    assert raw_event_heads(values) == expected


def test_the_native_heads_are_the_python_heads() -> None:
    """The native core's raw_event_heads against the Python one, over valid, cut and corrupted events:
    the same head, or None (the batch loop then asks peek_raw_event) where the bytes are odd (a negative
    length, which the Python reader follows backwards), and never a head where Python finds none."""
    if cdc_native is None:
        pytest.skip("the native core is not installed (make setup builds it)")
    rng = random.Random(12)
    values: list[bytes | None] = []
    for n in range(2000):
        data = _event_bytes(rng, n)
        values.append(data)
        values.append(data[: rng.randrange(len(data) + 1)])
        corrupted = bytearray(data)
        for _ in range(rng.randrange(1, 6)):
            corrupted[rng.randrange(min(len(data), 200))] = rng.randrange(256)
        values.append(bytes(corrupted))
        values.append(rng.randbytes(rng.randrange(60)))
    values += [None, b"", bytearray(b"\x02")]  # type: ignore[list-item]
    native = cdc_native.raw_event_heads(values)
    python = raw_event_heads(values)
    assert [n if n is None else p for n, p in zip(native, python, strict=True)] == native
    assert sum(head is not None for head in native) >= 2000
    assert sum(n is None and p is not None for n, p in zip(native, python, strict=True)) < 20
