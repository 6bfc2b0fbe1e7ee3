"""The RocksDB state of one Kafka partition: rows, headers, due index, digests and offsets in one DB.

One ``PartitionStore`` per raw-topic partition a worker owns, in its own directory, so that handing a
partition to another worker moves one directory's worth of state (or none: the changelog rebuilds it).
Changes go through ``transaction()`` (see state.store.transaction); the read helpers here read committed state
only, for the REST endpoint and tests.

Memory is bounded by the RocksDB options, not by the data: memtables (``write_buffer_bytes`` x
``max_write_buffers``, or a shared WriteBufferManager) and one block cache that also holds the index and
filter blocks (partitioned, see ``_rocks_options``), so that ten million rows cost cache space, not heap.
Pass one ``Cache`` in ``StoreOptions.cache`` to share it between the partitions of a worker.
"""

from __future__ import annotations

import heapq
import shutil
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from rocksdict import (
    BlockBasedIndexType,
    BlockBasedOptions,
    Cache,
    DBCompressionType,
    Options,
    Rdict,
    ReadOptions,
    WriteBatch,
    WriteBufferManager,
    WriteOptions,
)

from cassandra_model.table_schema import TableSchema
from state.errors import StoreError
from state.partition_state import PartitionState
from state.store.codec import decode_header_value, decode_row_value
from state.store.keys import (
    DIGEST,
    HEADER,
    ROW,
    digest_age_key_of,
    header_key,
    meta_key,
    pack_u64,
    partition_key_of,
    partition_order,
    prefix_end,
    row_key,
    row_prefix,
    table_id_of,
    table_prefix,
    unpack_u64,
)
from state.store.recent_digests import RecentDigests
from state.store.transaction import StateTransaction

MiB = 1024 * 1024
#: layout version of the whole store (keys and meta); state.store.codec versions the values
STORE_FORMAT = 1

_DIGEST_KIND = DIGEST[0]
_HEADER_KIND = HEADER[0]
_SOURCE_OFFSET = meta_key("source_offset")
_CHANGELOG_OFFSET = meta_key("changelog_offset")
_FORMAT = meta_key("format")
_PARTITION = meta_key("partition")
#: the two runs of entries that name a table's partitions, and the first key of a partition in each
_PARTITION_RUNS = ((HEADER, header_key), (ROW, row_prefix))

#: the RocksDB properties ``stats`` reports
_STAT_PROPERTIES = {
    "estimated_keys": "rocksdb.estimate-num-keys",
    "sst_bytes": "rocksdb.total-sst-files-size",
    "live_data_bytes": "rocksdb.estimate-live-data-size",
    "memtable_bytes": "rocksdb.cur-size-all-mem-tables",
    "table_readers_bytes": "rocksdb.estimate-table-readers-mem",
    "block_cache_bytes": "rocksdb.block-cache-usage",
    "block_cache_pinned_bytes": "rocksdb.block-cache-pinned-usage",
}


@dataclass(slots=True)
class StoreOptions:
    """RocksDB settings of one partition store (small by default: a worker holds several)."""

    write_buffer_bytes: int = 8 * MiB
    max_write_buffers: int = 2
    #: size of the store's own block cache, when ``cache`` is not given
    block_cache_bytes: int = 32 * MiB
    #: one block cache shared by every store of a worker (bounds them together)
    cache: Cache | None = None
    #: one memtable budget shared by every store of a worker
    write_buffer_manager: WriteBufferManager | None = None
    bloom_bits_per_key: int = 10
    background_jobs: int = 2
    #: RocksDB's write-ahead log. Off by default: every write is also in the changelog topic, committed
    #: in the same Kafka transaction, and the changelog offset a store has applied is written in the same
    #: WriteBatch as the data, so a store that loses its unflushed writes in a crash is consistent at an
    #: earlier offset and catches up from the changelog when it is opened (a clean close flushes)
    write_ahead_log: bool = False
    #: rows one transaction rewrites, at most, to purge a partition or range deletion past gc_grace (the
    #: store keeps the rows such a deletion covers as they were; see state.store.transaction). A wider
    #: deletion is purged over several transactions, a second apart, and stays in force until then
    shadow_rows_per_transaction: int = 20_000
    #: the shortest time (s) a tombstone or an expired cell stays, whatever the table's gc_grace_seconds:
    #: the store purges at max(gc_grace_seconds, this). Cassandra's rule alone (0) lets a copy that comes
    #: later than gc_grace_seconds bring deleted data back; the worker's copies come late by design
    #: (several replicas, hints, a redelivery after the digest horizon), so it sets its tombstone floor
    tombstone_floor_s: int = 0

    def gc_grace_seconds(self, schema: TableSchema) -> int:
        """How long after its local deletion time a tombstone or expired cell of ``schema``'s table
        stays in this store."""
        return max(schema.gc_grace_seconds, self.tombstone_floor_s)


def _rocks_options(options: StoreOptions) -> Options:
    opts = Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.set_write_buffer_size(options.write_buffer_bytes)
    opts.set_max_write_buffer_number(options.max_write_buffers)
    opts.set_max_background_jobs(options.background_jobs)
    opts.set_compression_type(DBCompressionType.lz4())  # every level: loads decompress a block per row
    opts.set_level_compaction_dynamic_level_bytes(True)
    opts.set_keep_log_file_num(2)
    opts.set_max_log_file_size(4 * MiB)
    # a bloom filter over each memtable's keys: most point reads of an event miss (the header of a
    # partition without deletions or static cells, a new row, a digest not seen), and without it every
    # miss searches every memtable; 5 % more events/s in bench/state_store.py, for a tenth of each
    # memtable's bytes
    opts.set_memtable_whole_key_filtering(True)
    opts.set_memtable_prefix_bloom_ratio(0.1)
    if options.write_buffer_manager is not None:
        opts.set_write_buffer_manager(options.write_buffer_manager)
    table = BlockBasedOptions()
    table.set_block_cache(options.cache if options.cache is not None else Cache(options.block_cache_bytes))
    table.set_bloom_filter(options.bloom_bits_per_key, False)
    # Index and filter blocks live in the block cache, in 4 KiB partitions under a pinned top level. With
    # one whole-file filter and index block per SST (about 1.2 MB per million keys, more than one shard
    # of a small LRU cache holds) a get at 1M rows took 0.8 ms instead of 12 µs: they were read again.
    table.set_index_type(BlockBasedIndexType.two_level_index_search())
    table.set_partition_filters(True)
    table.set_metadata_block_size(4096)
    table.set_cache_index_and_filter_blocks(True)
    table.set_pin_top_level_index_and_filter(True)
    table.set_pin_l0_filter_and_index_blocks_in_cache(True)
    table.set_format_version(5)
    opts.set_block_based_table_factory(table)
    return opts


class PartitionStore:
    """The state of Kafka partition ``partition`` in the RocksDB directory ``path`` (created if missing).

    Opening checks that the directory holds this partition's state in this store format.
    """

    def __init__(self, path: Path, partition: int, options: StoreOptions | None = None) -> None:
        self.path = Path(path)
        self.partition = partition
        self.options = options if options is not None else StoreOptions()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.db = Rdict(str(self.path), _rocks_options(self.options))
        except Exception as exc:  # rocksdict raises plain Exception for I/O and lock errors
            raise StoreError(f"cannot open the state of partition {partition} at {self.path}: {exc}") from exc
        self._write_options = WriteOptions()
        self._write_options.disable_wal = not self.options.write_ahead_log
        self._active: StateTransaction | None = None
        #: digest keys committed lately (a memo in front of RocksDB for replica copies)
        self.recent_digests = RecentDigests()
        self._closed = False
        try:
            self._check_identity()
        except Exception:
            self.db.close()
            raise
        self._source_offset = self._read_offset(_SOURCE_OFFSET)
        self._changelog_offset = self._read_offset(_CHANGELOG_OFFSET) or 0
        #: the ids of the tables with a partition header in RocksDB, or that had one: a load reads no
        #: header of another table (most tables never see a deletion or a static cell, and the header
        #: read of their partitions is a miss that costs as much as a hit)
        self.header_tables: set[bytes] = self._tables_with_headers()

    def _tables_with_headers(self) -> set[bytes]:
        """One seek per table with headers."""
        found: set[bytes] = set()
        read = ReadOptions()
        read.set_iterate_upper_bound(prefix_end(HEADER))
        start = HEADER
        while (key := next(iter(self.db.keys(from_key=start, read_opt=read)), None)) is not None:
            table_id = table_id_of(key)
            found.add(table_id)
            start = prefix_end(table_prefix(HEADER, table_id))
        return found

    def _check_identity(self) -> None:
        stored_format = self.db.get(_FORMAT)
        stored_partition = self.db.get(_PARTITION)
        if stored_format is None:
            if next(iter(self.db.keys()), None) is not None:
                raise StoreError(f"{self.path} holds data but no store format: not a partition store")
            batch = WriteBatch(raw_mode=True)
            batch.put(_FORMAT, pack_u64(STORE_FORMAT))
            batch.put(_PARTITION, pack_u64(self.partition))
            self.db.write(batch)
            return
        if unpack_u64(stored_format) != STORE_FORMAT:
            raise StoreError(
                f"the state at {self.path} has store format {unpack_u64(stored_format)}; "
                f"this code reads format {STORE_FORMAT}"
            )
        if stored_partition is None or unpack_u64(stored_partition) != self.partition:
            found = "none" if stored_partition is None else unpack_u64(stored_partition)
            raise StoreError(f"the state at {self.path} is of partition {found}, not {self.partition}")

    def _read_offset(self, key: bytes) -> int | None:
        value = self.db.get(key)
        return None if value is None else unpack_u64(value)

    def __enter__(self) -> PartitionStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PartitionStore(partition={self.partition}, path={str(self.path)!r})"

    @property
    def closed(self) -> bool:
        return self._closed

    # -- offsets

    @property
    def source_offset(self) -> int | None:
        """The next raw-topic offset to consume, committed with this state (None: unknown, e.g. after a
        restore; take the consumer group's committed offset then)."""
        return self._source_offset

    @property
    def changelog_offset(self) -> int:
        """The next changelog offset to apply: every changelog record before it is in this DB."""
        return self._changelog_offset

    # -- writing

    def _check_usable(self) -> None:
        if self._closed:
            raise StoreError(f"the state of partition {self.partition} at {self.path} is closed")

    def transaction(self) -> StateTransaction:
        """Start the batch's transaction; only one may be open at a time (they would not see each other)."""
        self._check_usable()
        if self._active is not None:
            raise StoreError(f"partition {self.partition} already has an open transaction")
        self._active = StateTransaction(self)
        return self._active

    def transaction_ended(self, transaction: StateTransaction) -> None:
        """Called by a transaction when it commits or rolls back."""
        if self._active is transaction:
            self._active = None

    def write(
        self,
        entries: Iterable[tuple[bytes, bytes | None]],
        *,
        source_offset: int | None,
        changelog_offset: int,
    ) -> int:
        """Write entries (None: delete) and both offsets in one atomic WriteBatch; how many entries.

        A digest entry brings its age key along (``digest_age_key_of``): the transaction and the
        changelog carry one record per remembered digest, not two. The horizon deletes both keys."""
        self._check_usable()
        if changelog_offset < 0:
            raise StoreError(f"changelog offset {changelog_offset} of partition {self.partition} is negative")
        batch = WriteBatch(raw_mode=True)
        count = 0
        digests: list[tuple[bytes, bool]] = []
        for key, value in entries:
            if not isinstance(key, bytes) or not key:
                raise StoreError(
                    f"partition {self.partition}: a state key must be non-empty bytes, got {key!r}"
                )
            if value is None:
                batch.delete(key)
            else:
                batch.put(key, value)
            kind = key[0]
            if kind == _DIGEST_KIND:
                if value is not None:
                    batch.put(self._age_key(key, value), b"")
                digests.append((key, value is not None))
            elif kind == _HEADER_KIND and value is not None:
                self.header_tables.add(table_id_of(key))  # before the write: a superset is safe
            count += 1
        if source_offset is None:
            batch.delete(_SOURCE_OFFSET)
        else:
            batch.put(_SOURCE_OFFSET, pack_u64(source_offset))
        batch.put(_CHANGELOG_OFFSET, pack_u64(changelog_offset))
        try:
            self.db.write(batch, self._write_options)
        except Exception as exc:
            raise StoreError(
                f"cannot write the state of partition {self.partition} at {self.path}: {exc}"
            ) from exc
        self._source_offset = source_offset
        self._changelog_offset = changelog_offset
        recent = self.recent_digests
        for key, stored in digests:
            if stored:
                recent.add(key)
            else:
                recent.discard(key)
        return count

    def _age_key(self, key: bytes, first_seen: bytes) -> bytes:
        try:
            return digest_age_key_of(key, first_seen)
        except StoreError as exc:
            raise StoreError(f"partition {self.partition}: {exc}") from None

    def restore(
        self,
        records: Iterable[tuple[bytes, bytes | None]],
        changelog_offset: int,
        *,
        source_offset: int | None = None,
    ) -> int:
        """Apply changelog records (key, value; None = delete) in one WriteBatch, and the offset after
        them. Call it per chunk of the changelog: each call is atomic and resumable from its offset."""
        if self._active is not None:
            raise StoreError(f"partition {self.partition}: cannot restore during an open transaction")
        return self.write(records, source_offset=source_offset, changelog_offset=changelog_offset)

    # -- reading committed state

    def _scan(self, lo: bytes, hi: bytes) -> Iterator[tuple[bytes, bytes]]:
        read = ReadOptions()
        read.set_iterate_upper_bound(hi)
        yield from self.db.items(from_key=lo, read_opt=read)

    def _header(self, table_id: uuid.UUID, partition_key: bytes) -> PartitionState:
        value = self.db.get(header_key(table_id.bytes, partition_key))
        return PartitionState(partition_key) if value is None else decode_header_value(partition_key, value)

    def read_partition(self, table_id: uuid.UUID, partition_key: bytes) -> PartitionState:
        """The whole committed partition (header and every row, as the header shows them); empty when
        nothing is stored."""
        self._check_usable()
        state = self._header(table_id, partition_key)
        prefix = row_prefix(table_id.bytes, partition_key)
        size = len(prefix)
        for key, value in self._scan(prefix, prefix_end(prefix)):
            state.add_stored_row(key[size:], decode_row_value(value, key))
        return state

    def read_row(self, table_id: uuid.UUID, partition_key: bytes, clustering_key: bytes) -> PartitionState:
        """The committed header and one row (enough for that row's image; the static-only row needs
        ``read_partition``)."""
        self._check_usable()
        state = self._header(table_id, partition_key)
        key = row_key(table_id.bytes, partition_key, clustering_key)
        value = self.db.get(key)
        if value is not None:
            state.add_stored_row(clustering_key, decode_row_value(value, key))
        return state

    def partition_keys(self, table_id: uuid.UUID, after: bytes | None = None) -> Iterator[bytes]:
        """The committed partition keys of a table after ``after`` (None: from the first), in stored
        order (``partition_order``), one at a time.

        A partition is stored as a header (deletion, static row, range tombstones), rows, or both; both
        kinds of entry order partition keys alike, so the two runs merge in that order. The row run
        skips from one partition to the next instead of reading every row."""
        self._check_usable()
        runs = [self._partition_run(table_id, kind, first, after) for kind, first in _PARTITION_RUNS]
        last = None
        for partition_key in heapq.merge(*runs, key=partition_order):
            if partition_key != last:
                yield partition_key
                last = partition_key

    def _partition_run(
        self,
        table_id: uuid.UUID,
        kind: bytes,
        first_key: Callable[[bytes, bytes], bytes],
        after: bytes | None,
    ) -> Iterator[bytes]:
        prefix = table_prefix(kind, table_id.bytes)
        read = ReadOptions()
        read.set_iterate_upper_bound(prefix_end(prefix))
        start = prefix if after is None else prefix_end(first_key(table_id.bytes, after))
        while (key := next(iter(self.db.keys(from_key=start, read_opt=read)), None)) is not None:
            partition_key = partition_key_of(key)
            yield partition_key
            start = prefix_end(first_key(table_id.bytes, partition_key))

    def count_rows(self, table_id: uuid.UUID | None = None) -> int:
        """Stored clustering rows (live or not), of one table or all; a key scan, not free."""
        self._check_usable()
        prefix = ROW if table_id is None else ROW + table_id.bytes
        read = ReadOptions()
        read.set_iterate_upper_bound(prefix_end(prefix))
        return sum(1 for _ in self.db.keys(from_key=prefix, read_opt=read))

    def stats(self) -> dict[str, int]:
        """RocksDB's own cheap estimates: keys, SST and memtable bytes, cache use."""
        self._check_usable()
        out: dict[str, int] = {}
        for name, prop in _STAT_PROPERTIES.items():
            value = self.db.property_int_value(prop)
            if value is not None:
                out[name] = value
        return out

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        """Every committed key and value in key order (meta included)."""
        self._check_usable()
        yield from self.db.items()

    # -- lifecycle

    def flush(self) -> None:
        """Write memtables to SST files (for size measurements and before copying the directory)."""
        self._check_usable()
        self.db.flush()

    def close(self) -> None:
        """Close the DB; an open transaction is dropped (its writes never reached RocksDB)."""
        if self._closed:
            return
        if self._active is not None:
            self._active.rollback()
        self._closed = True
        self.db.close()

    @staticmethod
    def destroy(path: Path) -> None:
        """Delete a closed store's files and directory."""
        path = Path(path)
        if path.exists():
            Rdict.destroy(str(path))
            shutil.rmtree(path, ignore_errors=True)
