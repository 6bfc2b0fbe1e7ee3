"""One batch of work on a partition store, as one Kafka transaction sees it.

Writes go to an overlay (key -> bytes, or None for a delete) that every read of the transaction looks
at first, so a batch sees its own writes; nothing reaches RocksDB until ``commit``, which writes the
overlay and the offsets in one WriteBatch. The overlay, in first-write order, is also the changelog:
the worker sends ``changelog()`` to the compacted changelog topic inside the same Kafka transaction,
and a fresh worker replays that topic into an empty store (``PartitionStore.restore``).

Partition and range deletions are written to the header alone: a stored row keeps what a deletion
covering it deletes, and every read shadows it by the header (``PartitionState.shadowed``), as Cassandra
reads data under a tombstone until compaction. So a deletion of a million rows writes one value. Before
the header lets such a deletion go (purged past gc_grace_seconds), the rows under it are rewritten as it
shows them, at most ``StoreOptions.shadow_rows_per_transaction`` per transaction; until then it stays.

Loads are sparse: a partition update reads the header and the rows it names. The other rows it changes
(every row under a partition deletion or a change of static columns, the rows inside a range deletion)
are streamed with ``rows`` by ``state.store.merge``, never loaded together. A table with static columns needs
one more thing: whether some other row exists, because a partition with live static cells and no row
shows a static-only row. For that a load adds one "witness": the first row, in clustering order, that
exists and that the update cannot touch.

Saves purge tombstones past gc_grace_seconds (or the store's longer ``tombstone_floor_s``: a copy of an
older write that comes later must still meet them), write only rows whose bytes change, and keep the due
index (``X`` keys, see state.store.keys) exact: every row and header has one entry at the earliest second at
which a live cell or liveness expires or a tombstone becomes purgeable, or none.
"""

from __future__ import annotations

import heapq
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rocksdict import ReadOptions

from cassandra_model.table_schema import TableSchema
from state.errors import StoreError
from state.partition_state import PartitionState, PreparedEvent
from state.row_image import row_exists, static_columns
from state.row_state import RowState
from state.store.codec import (
    decode_header_value,
    decode_row_value,
    encode_header_value,
    encode_row_value,
    stored_due,
)
from state.store.keys import (
    DIGEST_AGE,
    DUE,
    HEADER,
    ROW,
    digest_age_until,
    digest_key,
    due_key,
    due_until,
    header_key,
    meta_key,
    pack_u64,
    parse_digest_age_key,
    parse_due_key,
    partition_key_of,
    partition_order,
    prefix_end,
    row_group,
    row_prefix,
    table_prefix,
)
from state.table_layout import TableLayout, layout_for

if TYPE_CHECKING:
    from state.store.partition_store import PartitionStore

_ROW_KIND = ROW[0]
_DUE_KIND = DUE[0]
_DIGEST_AGE_KIND = DIGEST_AGE[0]
#: meta names the store writes itself at commit; not part of the changelog
RESERVED_META = frozenset({"source_offset", "changelog_offset", "format", "partition"})
#: in a savepoint's undo record: the key was not in the overlay
_ABSENT = object()


@dataclass(frozen=True, slots=True)
class DueExpiry:
    """A row (or the header: ``clustering_key`` None) that needs a look at ``at_s``: something in it
    expires then, or a tombstone becomes purgeable. Load it with ``load_rows`` and save it."""

    table_id: uuid.UUID
    partition_key: bytes
    clustering_key: bytes | None
    at_s: int


def _scan_group(key: bytes) -> bytes | None:
    """The group a written key is scanned with: its partition's row prefix, or the X or E kind byte
    (None: a key no scan reads, such as a header, a digest or a meta value)."""
    kind = key[0]
    if kind == _ROW_KIND:
        return row_group(key)
    if kind in (_DUE_KIND, _DIGEST_AGE_KIND):
        return key[:1]
    return None


def _purge_time(row: RowState) -> int | None:
    """The earliest local deletion time gc_grace counts from, of anything in the row."""
    times: list[int] = []
    if row.deletion is not None:
        times.append(row.deletion.local_deletion_time)
    if row.liveness is not None:
        when = row.liveness.purge_time()
        if when is not None:
            times.append(when)
    times.extend(d.local_deletion_time for d in row.complex_deletions.values())
    for cell in row.cells.values():
        if cell.flags:  # tombstone or expiring
            times.append(cell.local_deletion_time)
    for elements in row.complex_cells.values():
        times.extend(c.local_deletion_time for c in elements.values() if c.flags)
    return min(times, default=None)


def _lasting(row: RowState) -> bool:
    """Whether nothing in a row can expire or be purged: no deletion, no expiring liveness, only plain
    live simple cells. Such a row purges to itself and has no due second (what ``row_due`` and
    ``RowState.purge`` would find, without their walks over every cell)."""
    if row.deletion is not None or row.complex_cells or row.complex_deletions:
        return False
    liveness = row.liveness
    if liveness is not None and liveness.ttl != 0:
        return False
    return all(not cell.flags for cell in row.cells.values())


def _earliest(*times: int | None) -> int | None:
    return min((t for t in times if t is not None), default=None)


def row_due(row: RowState, now_s: int, gc_grace_seconds: int) -> int | None:
    """When a row next needs a look after ``now_s``: an expiry, or a tombstone passing gc_grace."""
    purge = _purge_time(row)
    return _earliest(row.next_expiry(now_s), None if purge is None else purge + gc_grace_seconds + 1)


def _purged_value(row: RowState | None, now_s: int, gc_grace_seconds: int) -> tuple[bytes | None, int | None]:
    """The stored value of a row (None: delete it) after the purge at ``now_s``, IN PLACE, and its due
    second."""
    if row is None:
        return None, None
    if _lasting(row):  # the usual row: nothing in it dies, expires or can be purged
        return (encode_row_value(row, None), None) if row.cells or row.liveness is not None else (None, None)
    row.purge(now_s - gc_grace_seconds)
    if row.is_empty():
        return None, None
    due = row_due(row, now_s, gc_grace_seconds)
    return encode_row_value(row, due), due


def header_due(state: PartitionState, now_s: int, gc_grace_seconds: int) -> int | None:
    """The same for the header: the static row, the partition deletion and the range deletions."""
    times: list[int | None] = []
    if state.static_row is not None:
        times.append(row_due(state.static_row, now_s, gc_grace_seconds))
    if state.partition_deletion is not None:
        times.append(state.partition_deletion.local_deletion_time + gc_grace_seconds + 1)
    purge = state.range_tombstones.next_purge_time()
    if purge is not None:
        times.append(purge + gc_grace_seconds + 1)
    return _earliest(*times)


class StateTransaction:
    """The overlay of one batch over a PartitionStore; get one from ``PartitionStore.transaction()``."""

    def __init__(self, store: PartitionStore) -> None:
        self._store = store
        self._db = store.db
        self._overlay: dict[bytes, bytes | None] = {}
        #: overlay keys by scan group (a partition's row prefix, or the X or E kind byte)
        self._groups: dict[bytes, set[bytes]] = {}
        #: the stored value of every key a load read, so a save knows the old bytes and due entry
        self._known: dict[bytes, bytes | None] = {}
        #: the digest key the last seen_digest found missing (until the next write)
        self._unseen_digest: bytes | None = None
        self._open = True
        #: values read from RocksDB (point reads and scanned entries), and overlay writes
        self.reads = 0
        self.writes = 0
        #: rows this transaction may still rewrite before it purges a partition or range deletion
        self.shadow_budget = store.options.shadow_rows_per_transaction
        #: since the savepoint: each key's overlay value before its first write (``_ABSENT``: none)
        self._undo: dict[bytes, object] | None = None
        self._savepoint_budget = self.shadow_budget

    def __enter__(self) -> StateTransaction:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._open:
            self.rollback()

    @property
    def is_open(self) -> bool:
        return self._open

    def _check_open(self) -> None:
        # closing the store rolls its open transaction back, so ``_open`` says it all
        if not self._open:
            raise StoreError(f"the transaction on partition {self._store.partition} is already finished")

    # -- raw access (overlay first)

    def _get(self, key: bytes) -> bytes | None:
        overlay = self._overlay
        if key in overlay:
            return overlay[key]
        self.reads += 1
        return self._db.get(key)

    def _stored(self, key: bytes) -> bytes | None:
        """The value a load saw for ``key`` (or the current one, for a key no load read)."""
        known = self._known
        return known[key] if key in known else self._get(key)

    def _put(self, key: bytes, value: bytes | None) -> None:
        undo = self._undo
        if undo is not None and key not in undo:
            undo[key] = self._overlay.get(key, _ABSENT)
        self._overlay[key] = value
        self._unseen_digest = None
        self.writes += 1
        kind = key[0]  # _scan_group, inlined: this runs for every write of every event
        if kind == _ROW_KIND:
            group = row_group(key)
        elif kind in (_DUE_KIND, _DIGEST_AGE_KIND):
            group = key[:1]
        else:
            return
        members = self._groups.get(group)
        if members is None:
            self._groups[group] = {key}
        else:
            members.add(key)

    def _scan(self, lo: bytes, hi: bytes, group: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Live entries with ``lo <= key < hi`` in key order, the overlay merged over RocksDB."""
        members = self._groups.get(group)
        pending = sorted(k for k in members if lo <= k < hi) if members else []
        overlay = self._overlay
        i = 0
        read = ReadOptions()
        read.set_iterate_upper_bound(hi)
        for key, value in self._db.items(from_key=lo, read_opt=read):
            self.reads += 1
            while i < len(pending) and pending[i] < key:
                mine = overlay[pending[i]]
                if mine is not None:
                    yield pending[i], mine
                i += 1
            if i < len(pending) and pending[i] == key:
                i += 1
                mine = overlay[key]
                if mine is not None:
                    yield key, mine
                continue
            yield key, value
        for key in pending[i:]:
            mine = overlay[key]
            if mine is not None:
                yield key, mine

    # -- loading partitions

    def _read_loaded(
        self, table_id: bytes, partition_key: bytes, keys: Sequence[bytes]
    ) -> tuple[list[bytes], list[bytes | None]]:
        """The stored keys and values of the header and the rows at ``keys``, remembered as loaded (a
        save compares with them), one point read each (for the two or three keys of a load that is
        about 5 % quicker per event than one multi-get, whose set-up costs more than the reads share:
        bench/state_store.py)."""
        prefix = row_prefix(table_id, partition_key)
        full = [header_key(table_id, partition_key), *(prefix + k for k in keys)]
        get = self._get
        if table_id in self._store.header_tables or full[0] in self._overlay:
            values = [get(key) for key in full]
        else:  # no header of this table was ever committed, nor written here
            values = [None, *(get(key) for key in full[1:])]
        self._known.update(zip(full, values, strict=True))
        return full, values

    def _header_and_rows(
        self, table_id: bytes, partition_key: bytes, keys: Sequence[bytes]
    ) -> PartitionState:
        """The header and the rows at ``keys``."""
        full, values = self._read_loaded(table_id, partition_key, keys)
        header = values[0]
        state = (
            PartitionState(partition_key) if header is None else decode_header_value(partition_key, header)
        )
        for ck, key, value in zip(keys, full[1:], values[1:], strict=True):
            if value is not None:
                state.add_stored_row(ck, decode_row_value(value, key))
        return state

    def load_values(
        self, schema: TableSchema, partition_key: bytes, keys: Sequence[bytes]
    ) -> tuple[bytes | None, list[bytes | None]]:
        """The stored header and rows at ``keys`` as bytes, for a merge that works on the bytes (the
        native core's, see ``app.change_processor``); ``save_values`` writes the rows back."""
        self._check_open()
        _, values = self._read_loaded(schema.table_id.bytes, partition_key, keys)
        return values[0], values[1:]

    def save_values(
        self, schema: TableSchema, partition_key: bytes, rows: Iterable[tuple[bytes, bytes]]
    ) -> None:
        """Write the new values of rows loaded by ``load_values``: (clustering key, value) each, a value
        in which nothing expires or can be purged (so it has no due entry), as ``save`` would write it."""
        self._check_open()
        table_id = schema.table_id.bytes
        prefix = row_prefix(table_id, partition_key)
        for ck, new in rows:
            key = prefix + ck
            old = self._stored(key)
            if new != old:
                self._replace(key, old, new, None, table_id, partition_key, ck)

    def _load_witness(
        self,
        state: PartitionState,
        layout: TableLayout,
        prefix: bytes,
        since_s: int,
        now_s: int,
        skip: Sequence[tuple[bytes, bytes]] = (),
    ) -> None:
        """Add the first row not loaded yet, outside the ``skip`` ranges, that exists at ``since_s`` and
        ``now_s`` and does not expire in between (so no change will name it); the static-only row needs
        to know that one exists.

        Without such a row, add every such row that exists at ``since_s`` (each expires before
        ``now_s``): then the state holds every row outside ``skip`` that decides the static-only row,
        and the changes name them all, so a later look at the same partition does not announce that row
        again.
        """
        size = len(prefix)
        rows = state.rows
        expiring: list[tuple[bytes, bytes, RowState]] = []
        for key, value in self._scan(prefix, prefix_end(prefix), prefix):
            ck = key[size:]
            if ck in rows or any(start < ck < end for start, end in skip):
                continue
            row = state.shadowed(ck, decode_row_value(value, key))
            if row is None or not row_exists(row, layout, since_s):
                continue
            expiry = row.next_expiry(since_s)
            if (expiry is not None and expiry <= now_s) or not row_exists(row, layout, now_s):
                expiring.append((key, value, row))
                continue
            state.rows[ck] = row
            self._known[key] = value
            return
        for key, value, row in expiring:
            state.rows[key[size:]] = row
            self._known[key] = value

    def load(self, schema: TableSchema, prepared: PreparedEvent, now_s: int) -> PartitionState:
        """The header and the rows of the stored partition that the update names, as the header shows
        them; in a table with live static cells at ``now_s``, also one witness row outside the update's
        range deletions (see the module docstring).

        The other rows the update changes (all of them under a partition deletion or a static change,
        those inside a range deletion) are not loaded: ``state.store.merge`` streams them with ``rows``.
        """
        self._check_open()
        layout = layout_for(schema)
        table_id = schema.table_id.bytes
        state = self._header_and_rows(table_id, prepared.partition_key, [key for key, _, _ in prepared.rows])
        if layout.static and state.static_row is not None and static_columns(state, layout, now_s):
            prefix = row_prefix(table_id, prepared.partition_key)
            skip = [(start, end) for start, end, _ in prepared.ranges]
            self._load_witness(state, layout, prefix, now_s, now_s, skip)
        return state

    def load_rows(
        self,
        schema: TableSchema,
        partition_key: bytes,
        keys: Iterable[bytes | None],
        *,
        since_s: int,
        now_s: int,
    ) -> PartitionState:
        """The header and the given rows (None: the static row, always in the header), for the changes
        time made between ``since_s`` and ``now_s``. In a partition with live static cells at
        ``since_s``, also a witness row as ``load`` adds, unless a static cell expires in
        ``(since_s, now_s]``: that changes every row, and ``state.store.merge`` streams them all."""
        self._check_open()
        layout = layout_for(schema)
        table_id = schema.table_id.bytes
        state = self._header_and_rows(table_id, partition_key, [k for k in keys if k is not None])
        static = state.static_row if layout.static else None
        if static is not None and static_columns(state, layout, since_s):
            expiry = static.next_expiry(since_s)
            if expiry is None or expiry > now_s:
                self._load_witness(state, layout, row_prefix(table_id, partition_key), since_s, now_s)
        return state

    def header(self, schema: TableSchema, partition_key: bytes) -> PartitionState:
        """The partition's header as this transaction sees it, decoded afresh (no rows)."""
        self._check_open()
        value = self._get(header_key(schema.table_id.bytes, partition_key))
        return PartitionState(partition_key) if value is None else decode_header_value(partition_key, value)

    def rows(
        self, schema: TableSchema, partition_key: bytes, ranges: Sequence[tuple[bytes, bytes]] | None
    ) -> Iterator[tuple[bytes, RowState, int | None]]:
        """The rows of a partition inside ``ranges`` (sorted, disjoint bound positions; None: every row),
        as stored (not shadowed by the header), in clustering order, one at a time; with each its due
        second. Reads the transaction's own writes."""
        self._check_open()
        prefix = row_prefix(schema.table_id.bytes, partition_key)
        size = len(prefix)
        for key, value in self._row_entries(prefix, ranges):
            yield key[size:], decode_row_value(value, key), stored_due(value)

    def _row_entries(
        self, prefix: bytes, ranges: Sequence[tuple[bytes, bytes]] | None
    ) -> Iterator[tuple[bytes, bytes]]:
        if ranges is None:
            yield from self._scan(prefix, prefix_end(prefix), prefix)
            return
        for start, end in ranges:
            yield from self._scan(prefix + start, prefix + end, prefix)

    def partition_keys(self, table_id: uuid.UUID) -> Iterator[bytes]:
        """Every partition key of a table stored or written in this transaction, in stored order
        (``partition_order``), one at a time (a key whose entries this transaction deleted may come:
        reading it finds nothing)."""
        self._check_open()
        prefixes = (table_prefix(HEADER, table_id.bytes), table_prefix(ROW, table_id.bytes))
        size = len(prefixes[0])
        written = sorted(
            {partition_key_of(k) for k, v in self._overlay.items() if v is not None and k[:size] in prefixes},
            key=partition_order,
        )
        last = None
        for partition_key in heapq.merge(self._store.partition_keys(table_id), written, key=partition_order):
            if partition_key != last:
                yield partition_key
                last = partition_key

    # -- saving partitions

    def save(
        self,
        schema: TableSchema,
        state: PartitionState,
        keys: Iterable[bytes | None],
        now_s: int,
        *,
        header: bool,
    ) -> None:
        """Write back the rows at ``keys`` (deleted when absent from ``state.rows`` or empty after the
        purge) and, with ``header`` (or a None in ``keys``), the header.

        Tombstones and dead data older than ``now_s - gc_grace_seconds`` (never less than the store's
        ``tombstone_floor_s``, see StoreOptions) are purged first, IN PLACE (the rows of ``state``; a
        row purged empty stays in ``state.rows``, empty). Only values whose bytes change are written,
        each with its due-index entry. Save every row whose stored state changed (``ApplyResult.rows``)
        and every row a change names, after the changes are computed.
        """
        self._check_open()
        table_id = schema.table_id.bytes
        partition_key = state.partition_key
        gc_grace = self._store.options.gc_grace_seconds(schema)
        prefix = row_prefix(table_id, partition_key)
        for ck in keys:
            if ck is None:
                header = True
                continue
            key = prefix + ck
            old = self._stored(key)
            new, due = _purged_value(state.rows.get(ck), now_s, gc_grace)
            if new != old:
                self._replace(key, old, new, due, table_id, partition_key, ck)
        if header:
            self._save_header(state, table_id, now_s, gc_grace)

    def _save_header(self, state: PartitionState, table_id: bytes, now_s: int, gc_grace: int) -> None:
        gc_before = now_s - gc_grace
        deletion = state.partition_deletion
        purge_deletion = deletion is not None and deletion.local_deletion_time < gc_before
        doomed = None if purge_deletion else state.range_tombstones.purgeable(gc_before)
        due: int | None = None
        if doomed is None or doomed:
            if self._shadow_stored_rows(state, table_id, doomed, now_s, gc_grace):
                if purge_deletion:
                    state.partition_deletion = None
                state.range_tombstones.purge(gc_before)
            else:  # rows still hold what the deletions delete: keep them, and carry on in a second
                due = now_s + 1
        static = state.static_row
        if static is not None:
            static.purge(gc_before)
            if static.is_empty():
                state.static_row = None
        key = header_key(table_id, state.partition_key)
        old = self._stored(key)
        new = None
        if state.partition_deletion is not None or state.static_row is not None or state.range_tombstones:
            if due is None:
                due = header_due(state, now_s, gc_grace)
            new = encode_header_value(state.partition_deletion, state.static_row, state.range_tombstones, due)
        else:
            due = None
        if new != old:
            self._replace(key, old, new, due, table_id, state.partition_key, None)

    def _shadow_stored_rows(
        self,
        state: PartitionState,
        table_id: bytes,
        ranges: Sequence[tuple[bytes, bytes]] | None,
        now_s: int,
        gc_grace: int,
    ) -> bool:
        """Rewrite the stored rows inside ``ranges`` (None: all) as the header shows them, purged, so that
        the deletions covering them can be purged without bringing back what they deleted. Writes at most
        the transaction's ``shadow_budget`` rows; False when that ran out first."""
        partition_key = state.partition_key
        prefix = row_prefix(table_id, partition_key)
        size = len(prefix)
        for key, value in self._row_entries(prefix, ranges):
            ck = key[size:]
            new, due = _purged_value(state.shadowed(ck, decode_row_value(value, key)), now_s, gc_grace)
            if new == value:
                continue
            if self.shadow_budget <= 0:
                return False
            self.shadow_budget -= 1
            self._replace(key, value, new, due, table_id, partition_key, ck)
        return True

    def _replace(
        self,
        key: bytes,
        old: bytes | None,
        new: bytes | None,
        due: int | None,
        table_id: bytes,
        partition_key: bytes,
        clustering_key: bytes | None,
    ) -> None:
        self._put(key, new)
        self._known[key] = new
        old_due = None if old is None else stored_due(old)
        if old_due != due:
            if old_due is not None:
                self._put(due_key(old_due, table_id, partition_key, clustering_key), None)
            if due is not None:
                self._put(due_key(due, table_id, partition_key, clustering_key), b"")

    # -- time

    def due_expiries(self, now_s: int, limit: int) -> list[DueExpiry]:
        """Up to ``limit`` rows and headers due at or before ``now_s``, earliest first."""
        self._check_open()
        out: list[DueExpiry] = []
        if limit <= 0:
            return out
        for key, _ in self._scan(DUE, due_until(now_s), DUE):
            at_s, table_id, partition_key, clustering_key = parse_due_key(key)
            out.append(DueExpiry(table_id, partition_key, clustering_key, at_s))
            if len(out) >= limit:
                break
        return out

    def set_aside_due(self, items: Sequence[DueExpiry]) -> None:
        """Take ``items`` out of the due index; their rows stay as stored. The worker does this to a stored
        partition whose expiry it could not compute (after reporting it), so that no expiry pass stops on
        it again."""
        self._check_open()
        for item in items:
            self._put(due_key(item.at_s, item.table_id.bytes, item.partition_key, item.clustering_key), None)

    # -- replica copies

    def seen_digest(self, digest: bytes) -> bool:
        """Whether a partition update with this digest was remembered (and not yet expired). Asked of
        every raw record (two thirds are replica copies): the overlay, then the memo of recent commits,
        then RocksDB."""
        self._check_open()
        key = digest_key(digest)
        overlay = self._overlay
        if key in overlay:
            seen = overlay[key] is not None
        elif key in self._store.recent_digests:
            seen = True  # committed lately: no RocksDB read
        else:
            self.reads += 1
            seen = self._db.get(key) is not None
        self._unseen_digest = None if seen else key
        return seen

    def remember_digest(self, digest: bytes, now_ms: int) -> bool:
        """Remember a digest as first seen at ``now_ms``; False (and no write) when already known."""
        self._check_open()
        key = digest_key(digest)
        # the usual call follows a seen_digest that just missed it: nothing was written since
        if key != self._unseen_digest and self.seen_digest(digest):
            return False
        self._put(key, pack_u64(now_ms))  # its age key is written with it at commit (PartitionStore.write)
        return True

    def expire_digests(self, before_ms: int, limit: int) -> int:
        """Forget up to ``limit`` committed digests first seen before ``before_ms`` (oldest first); how
        many went. A digest remembered in this transaction has no age key before the commit, so a later
        pass forgets it."""
        self._check_open()
        doomed: list[bytes] = []
        if limit > 0:
            for key, _ in self._scan(DIGEST_AGE, digest_age_until(before_ms), DIGEST_AGE):
                doomed.append(key)
                if len(doomed) >= limit:
                    break
        for key in doomed:
            _, digest = parse_digest_age_key(key)
            self._put(key, None)
            self._put(digest_key(digest), None)
        return len(doomed)

    # -- meta

    def get_meta(self, name: str) -> bytes | None:
        self._check_open()
        return self._get(meta_key(name))

    def put_meta(self, name: str, value: bytes | None) -> None:
        """A worker's own meta value (None: delete), changelogged like state. Offsets are ``commit``'s."""
        self._check_open()
        if name in RESERVED_META:
            raise StoreError(f"meta {name!r} of partition {self._store.partition} is written by the store")
        self._put(meta_key(name), value)

    # -- savepoints

    def savepoint(self) -> None:
        """Mark this point of the transaction; ``rollback_to_savepoint`` forgets every write made since.

        One savepoint at a time (a new one replaces the last). The worker sets one before each raw event,
        so an event whose merge fails half-way (a value that does not decode while its change is built)
        is taken out whole and the batch goes on without it. The cost is one dictionary per savepoint and
        a lookup per write."""
        self._check_open()
        self._undo = {}
        self._savepoint_budget = self.shadow_budget

    def rollback_to_savepoint(self) -> None:
        """Undo every write since the savepoint (which stays set, now empty); reads see the state as it
        was there."""
        self._check_open()
        undo = self._undo
        if undo is None:
            raise StoreError(f"the transaction on partition {self._store.partition} has no savepoint")
        overlay, known = self._overlay, self._known
        for key, old in undo.items():
            known.pop(key, None)  # a later save reads the value again (from the overlay or RocksDB)
            if old is _ABSENT:
                del overlay[key]
                group = _scan_group(key)
                if group is not None:
                    self._groups[group].discard(key)
            else:
                overlay[key] = old  # type: ignore[assignment]
        undo.clear()
        self._unseen_digest = None
        self.shadow_budget = self._savepoint_budget

    # -- ending

    def changelog(self) -> list[tuple[bytes, bytes | None]]:
        """Every key written, in first-write order, with its last value (None: deleted)."""
        return list(self._overlay.items())

    def commit(self, source_offset: int | None, changelog_offset: int) -> None:
        """Write the overlay and the offsets in one WriteBatch. Call it after the Kafka transaction that
        carried ``changelog()`` committed: a local commit of an aborted batch could not be undone."""
        self._check_open()
        self._store.write(
            self._overlay.items(), source_offset=source_offset, changelog_offset=changelog_offset
        )
        self._finish()

    def rollback(self) -> None:
        """Forget every write; RocksDB is untouched."""
        self._check_open()
        self._finish()

    def _finish(self) -> None:
        self._open = False
        self._overlay = {}
        self._groups = {}
        self._known = {}
        self._undo = None
        self._store.transaction_ended(self)
