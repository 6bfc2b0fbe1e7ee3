"""Counter cells: merged shard by shard, not by last-write-wins.

Decision: counter tables are MERGED, not refused. What a replica's commit log holds for a counter update
is not the client's increment but the leader's new running total for its own shard (commit-log notes
§7.13): a CounterContext with one global shard ``(counter id, clock, count)``. Every replica logs the
same bytes. Cassandra merges contexts per counter id (the higher clock wins; on equal clocks the larger
count) and the counter's value is the sum of the counts over all ids. Doing the same over every logged
update gives the value Cassandra reads, because each leader's latest total supersedes its older ones.

Also Cassandra's (``Cells.resolveCounter``): a counter tombstone beats any live counter cell whatever the
timestamps (a deleted counter stays deleted until the tombstone is purged); two live counter cells merge
into one whose timestamp is the larger; row, range and partition deletions shadow counter cells by
timestamp as for any cell.

Not exact, by nature of the source: a counter id whose updates all predate CDC (or whose log was lost) is
missing from the sum; a bootstrap from SELECT yields only totals, not shards, so it cannot be merged with
later shards either. Pre-2.1 "local" shards (never written by 4.0+) are refused with CounterContextError;
legacy "remote" shards are merged like global ones.
"""

from __future__ import annotations

import struct

from state.cell_merge import TOMBSTONE, Cell
from state.errors import CounterContextError

_SHARD = struct.Struct(">16sqq")
_I16 = struct.Struct(">h")


def parse_counter_context(data: bytes) -> dict[bytes, tuple[int, int]]:
    """Shards of a CounterContext as ``{counter id: (clock, count)}``."""
    if len(data) < 2:
        raise CounterContextError(f"counter context of {len(data)} bytes has no header")
    header = abs(_I16.unpack_from(data)[0])
    start = 2 + 2 * header
    if start > len(data) or (len(data) - start) % _SHARD.size:
        raise CounterContextError(f"{len(data)} bytes are not a counter context with {header} header entries")
    for i in range(header):
        if _I16.unpack_from(data, 2 + 2 * i)[0] >= 0:
            raise CounterContextError("counter context holds a pre-2.1 local shard; it cannot be merged")
    shards: dict[bytes, tuple[int, int]] = {}
    for pos in range(start, len(data), _SHARD.size):
        counter_id, clock, count = _SHARD.unpack_from(data, pos)
        known = shards.get(counter_id)
        if known is None or (clock, count) > known:
            shards[counter_id] = (clock, count)
    return shards


def serialize_counter_context(shards: dict[bytes, tuple[int, int]]) -> bytes:
    """A canonical CounterContext: every shard global, ordered by counter id."""
    ids = sorted(shards)
    parts = [_I16.pack(len(ids))]
    parts.extend(_I16.pack(i - 32768) for i in range(len(ids)))
    parts.extend(_SHARD.pack(counter_id, *shards[counter_id]) for counter_id in ids)
    return b"".join(parts)


def merge_counter_contexts(a: bytes, b: bytes) -> bytes:
    """Per counter id the shard with the higher clock (then the larger count) survives."""
    shards = parse_counter_context(a)
    for counter_id, state in parse_counter_context(b).items():
        known = shards.get(counter_id)
        if known is None or state > known:
            shards[counter_id] = state
    return serialize_counter_context(shards)


def counter_value(context: bytes) -> int:
    """The counter's value: the sum of its shard counts, wrapped to a signed 64-bit long like Java."""
    total = sum(count for _, count in parse_counter_context(context).values())
    return ((total + 2**63) % 2**64) - 2**63


def canonical_counter_cell(cell: Cell) -> Cell:
    """A live counter cell with its context in canonical form (so equal states compare equal)."""
    if cell.flags & TOMBSTONE:
        return cell
    return Cell(cell.timestamp, 0, cell.local_deletion_time, 0, merge_counter_contexts(cell.value, b"\0\0"))


def reconcile_counter(a: Cell, b: Cell) -> Cell:
    """Cassandra's counter reconcile; both cells are expected canonical (see canonical_counter_cell)."""
    a_tomb = a.flags & TOMBSTONE
    b_tomb = b.flags & TOMBSTONE
    if a_tomb or b_tomb:
        if not b_tomb:
            return a
        if not a_tomb:
            return b
        return (
            a
            if (a.timestamp, a.local_deletion_time, a.value) >= (b.timestamp, b.local_deletion_time, b.value)
            else b
        )
    merged = merge_counter_contexts(a.value, b.value)
    timestamp = max(a.timestamp, b.timestamp)
    if merged == a.value and timestamp == a.timestamp:
        return a
    if merged == b.value and timestamp == b.timestamp:
        return b
    return Cell(timestamp, 0, a.local_deletion_time, 0, merged, a.path)
