"""Raw events (agent -> raw topic): one Avro record per partition update, values left serialized."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from cassandra_model.partition_update import DeletionTime, PartitionUpdate, RangeTombstoneBoundary, Row
from schemas import load_binary_codec

RAW_FORMAT = 1

#: ``source`` of the raw events the bootstrap job builds from rows read with CQL (not from a commit log):
#: a node name no host can have, and no segment. Kept in existing fields so the wire schema and
#: ``peek_raw_event``'s positional head stay as they are.
SNAPSHOT_NODE = "<snapshot>"
SNAPSHOT_SEGMENT_ID = -1
SNAPSHOT_DESCRIPTOR_VERSION = 0


def is_snapshot_source(source: dict[str, Any]) -> bool:
    """Whether a raw event's ``source`` is a bootstrap read (see SNAPSHOT_NODE)."""
    return source.get("node") == SNAPSHOT_NODE and source.get("segment_id") == SNAPSHOT_SEGMENT_ID


class RawEventError(ValueError):
    """A raw event or key that does not decode, or of a format this reader does not know."""


def _deletion(deletion: DeletionTime | None) -> dict[str, int] | None:
    if deletion is None:
        return None
    return {"timestamp": deletion.marked_for_delete_at, "local_deletion_time": deletion.local_deletion_time}


def _row(row: Row) -> dict[str, Any]:
    return {
        "clustering": list(row.clustering_raw),
        "liveness": None
        if row.timestamp is None
        else {"timestamp": row.timestamp, "ttl": row.ttl, "local_expiration_time": row.local_expiration_time},
        "deletion": _deletion(row.deletion),
        "complex_deletions": [
            {"column": d.column.name, "deletion": _deletion(d.deletion)} for d in row.complex_deletions
        ],
        "cells": [
            {
                "column": c.column.name,
                "path": c.path,
                "timestamp": c.timestamp,
                "ttl": c.ttl,
                "local_deletion_time": c.local_deletion_time,
                "flags": c.flags & 0x07,
                "value": c.raw,
            }
            for c in row.cells
        ],
    }


def raw_event_record(
    update: PartitionUpdate,
    *,
    cluster: str,
    node: str,
    segment_id: int,
    descriptor_version: int,
    digest: bytes,
    published_at_ms: int,
) -> dict[str, Any]:
    markers = []
    for marker in update.range_tombstones:
        if isinstance(marker, RangeTombstoneBoundary):
            closes, opens = marker.end_deletion, marker.start_deletion
        else:
            closes, opens = marker.deletion, None
        markers.append(
            {
                "kind": int(marker.kind),
                "clustering": list(marker.clustering_raw),
                "deletion": _deletion(closes),
                "start_deletion": _deletion(opens),
            }
        )
    return {
        "format": RAW_FORMAT,
        "source": {
            "cluster": cluster,
            "node": node,
            "segment_id": segment_id,
            "descriptor_version": descriptor_version,
            "entry_offset": update.offset or 0,
            "position": update.position or 0,
            "published_at_ms": published_at_ms,
        },
        "keyspace": update.keyspace,
        "table": update.table,
        "table_id": str(update.table_id),
        "partition_key": update.partition_key,
        "digest": digest,
        "is_counter": update.is_counter,
        "partition_deletion": _deletion(update.partition_deletion),
        "static_row": _row(update.static_row) if update.static_row is not None else None,
        "rows": [_row(r) for r in update.rows],
        "range_tombstones": markers,
    }


def raw_event_write_time(event: dict[str, Any]) -> int:
    """The largest write timestamp (µs) in a raw event (record or decoded): cells, livenesses, deletions.

    Where a writer's clock put the change: the worker's lag and the agent's gap edges are measured by it.
    It runs once per merged event, so it keeps one running maximum rather than a list."""
    best = -(2**63)

    def deletion(d: dict[str, Any] | None) -> None:
        nonlocal best
        if d is not None and d["timestamp"] > best:
            best = d["timestamp"]

    def row(r: dict[str, Any] | None) -> None:
        nonlocal best
        if r is None:
            return
        deletion(r.get("deletion"))
        liveness = r.get("liveness")
        if liveness is not None and liveness["timestamp"] > best:
            best = liveness["timestamp"]
        for cell in r["cells"]:
            if cell["timestamp"] > best:
                best = cell["timestamp"]
        for complex_deletion in r.get("complex_deletions") or ():
            deletion(complex_deletion.get("deletion"))

    deletion(event["partition_deletion"])
    row(event["static_row"])
    for r in event["rows"]:
        row(r)
    for marker in event["range_tombstones"]:
        deletion(marker.get("deletion"))
        deletion(marker.get("start_deletion"))
    return best


def encode_raw_event(record: dict[str, Any]) -> bytes:
    return load_binary_codec("raw_mutation").binary_encode(record)  # type: ignore[no-any-return]


def decode_raw_event(data: bytes) -> dict[str, Any]:
    try:
        record: dict[str, Any] = load_binary_codec("raw_mutation").binary_decode(data)
    except Exception as exc:  # bad bytes raise EOFError, ValueError, UnicodeDecodeError...
        raise RawEventError(f"raw event does not decode ({len(data)} bytes): {exc}") from exc
    if record["format"] != RAW_FORMAT:
        raise RawEventError(f"raw event format {record['format']} is not {RAW_FORMAT}; upgrade the reader")
    return record


#: the native core's decode of one raw event (``cdc_native.decode_raw_event``): its dict, or None where
#: the bytes are odd
NativeEventDecoder = Callable[[bytes], dict[str, Any] | None]
#: a raw record's value -> the raw event's dict (RawEventError where it does not decode)
RawEventReader = Callable[[bytes], dict[str, Any]]


def raw_event_reader(native: NativeEventDecoder | None) -> RawEventReader:
    """``decode_raw_event`` through the native core's decoder where one is given (the worker's and the
    replay's choice): it reads the events, and hands the bytes it finds odd to ``decode_raw_event``, which
    says what is wrong with them."""
    if native is None:
        return decode_raw_event

    def decode(data: bytes) -> dict[str, Any]:
        event = native(data)
        return decode_raw_event(data) if event is None else event

    return decode


@dataclass(slots=True, frozen=True)
class RawEventHead:
    """The fields before a raw event's body: enough to drop a replica copy without decoding the rest."""

    keyspace: str
    table: str
    digest: bytes


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """An Avro int/long (zigzag varint) at ``pos``; returns it and the position after it."""
    shift = result = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7


def _span(data: bytes, pos: int) -> tuple[int, int]:
    """Start and end of the Avro string/bytes at ``pos`` (one length byte when under 64 bytes)."""
    size = data[pos]
    if size < 0x80:
        return pos + 1, pos + 1 + (size >> 1)
    size, start = _varint(data, pos)
    return start, start + size


def peek_raw_event(data: bytes) -> RawEventHead:
    """Keyspace, table and digest of an encoded raw event, read by hand from the fixed field order of
    raw_mutation.avsc (format, source{cluster, node, 5 numbers}, keyspace, table, table_id,
    partition_key, digest): 2 µs against 7 for a full decode (bench/raw_event_codec.md), and a worker
    drops two of three events (the other replicas' copies) on the digest alone."""
    try:
        pos = 0
        while data[pos] & 0x80:  # format
            pos += 1
        _, pos = _span(data, pos + 1)  # source.cluster
        _, pos = _span(data, pos)  # source.node
        for _ in range(5):  # source.segment_id .. source.published_at_ms: skipped, not decoded
            while data[pos] & 0x80:
                pos += 1
            pos += 1
        start, pos = _span(data, pos)
        keyspace = data[start:pos].decode()
        start, pos = _span(data, pos)
        table = data[start:pos].decode()
        _, pos = _span(data, pos)  # table_id
        _, pos = _span(data, pos)  # partition_key
        digest = bytes(data[pos : pos + 16])
    except (IndexError, UnicodeDecodeError) as exc:
        raise RawEventError(f"raw event head does not decode ({len(data)} bytes): {exc}") from exc
    if len(digest) != 16:
        raise RawEventError(f"raw event of {len(data)} bytes ends inside its digest")
    return RawEventHead(keyspace, table, digest)


def raw_event_heads(values: Sequence[bytes | None]) -> list[tuple[str, bytes] | None]:
    """``peek_raw_event`` over a batch, as the worker uses it: per value its table ("keyspace.table") and
    digest, or None where the head does not decode (``peek_raw_event`` then says why). The native core's
    ``raw_event_heads`` (native/src/raw_event.rs) returns the same list, faster; tests hold both to it."""
    out: list[tuple[str, bytes] | None] = []
    for value in values:
        try:
            head = peek_raw_event(value)  # type: ignore[arg-type]
        except (RawEventError, TypeError):  # TypeError: not bytes (a record without a value)
            out.append(None)
            continue
        out.append((f"{head.keyspace}.{head.table}", head.digest))
    return out


def encode_raw_key(keyspace: str, table: str, partition_key: bytes) -> bytes:
    record = {"keyspace": keyspace, "table": table, "partition_key": partition_key}
    return load_binary_codec("raw_key").binary_encode(record)  # type: ignore[no-any-return]


def decode_raw_key(data: bytes) -> tuple[str, str, bytes]:
    try:
        record = load_binary_codec("raw_key").binary_decode(data)
    except Exception as exc:  # bad bytes raise EOFError, ValueError, UnicodeDecodeError...
        raise RawEventError(f"raw key does not decode: {data[:40]!r}") from exc
    return record["keyspace"], record["table"], record["partition_key"]
