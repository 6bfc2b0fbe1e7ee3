"""The RocksDB key layout of one Kafka partition's state: what lives under which key, in which order.

Every key starts with one kind byte; numbers are big-endian so that the store's byte order is their
numeric order, and every variable-length part that is followed by something else carries its length, so
that the keys of one partition never prefix those of another:

- ``P`` table id (16) | u32 pk length | pk                      -> partition header (deletion, static row,
  range tombstones; see state.store.codec)
- ``R`` table id (16) | u32 pk length | pk | clustering key     -> one row (state.store.codec); the rows of a
  partition are contiguous and in clustering order, so a range deletion is one key range
- ``X`` u64 due second | table id | u32 pk length | pk | flag | clustering key -> b"" : when a row (flag 1)
  or the header (flag 0, no clustering key) next needs a look: a cell or liveness expires, or a tombstone
  passes gc_grace_seconds. Ordered by time first, so "everything due by now" is one scan
- ``D`` digest                                                  -> u64 first-seen milliseconds
- ``E`` u64 first-seen milliseconds | digest                    -> b"" : the digests in age order, so the
  horizon is one scan. Written by the store beside each ``D`` entry it writes (``digest_age_key_of``),
  so the changelog carries the ``D`` entries alone (and the ``E`` deletes of the horizon)
- ``M`` name                                                    -> meta (offsets, format, partition)
"""

from __future__ import annotations

import struct
import uuid

from state.errors import StoreError

HEADER = b"P"
ROW = b"R"
DUE = b"X"
DIGEST = b"D"
DIGEST_AGE = b"E"
META = b"M"

#: X-key flags: the header (static row, partition and range deletions) or a clustering row
DUE_HEADER = 0
DUE_ROW = 1

_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_TABLE_ID = 16
#: kind byte + table id: where the u32 partition-key length starts in P, R keys
_PK_LEN_AT = 1 + _TABLE_ID
#: the same in X keys, after the due second
_DUE_PK_LEN_AT = 1 + 8 + _TABLE_ID


def _partition(table_id: bytes, partition_key: bytes) -> bytes:
    if len(table_id) != _TABLE_ID:
        raise StoreError(f"a table id has {_TABLE_ID} bytes, got {len(table_id)}")
    return table_id + _U32.pack(len(partition_key)) + partition_key


def header_key(table_id: bytes, partition_key: bytes) -> bytes:
    return HEADER + _partition(table_id, partition_key)


def row_prefix(table_id: bytes, partition_key: bytes) -> bytes:
    """The prefix shared by every row key of one partition (and by no other key)."""
    return ROW + _partition(table_id, partition_key)


def row_key(table_id: bytes, partition_key: bytes, clustering_key: bytes) -> bytes:
    return ROW + _partition(table_id, partition_key) + clustering_key


def row_group(key: bytes) -> bytes:
    """The partition prefix of a row key (``row_prefix`` of its table and partition key)."""
    end = _PK_LEN_AT + 4 + _U32.unpack_from(key, _PK_LEN_AT)[0]
    return key[:end]


def table_prefix(kind: bytes, table_id: bytes) -> bytes:
    """The prefix of every header (``HEADER``) or row (``ROW``) key of one table."""
    return kind + table_id


def table_id_of(key: bytes) -> bytes:
    """The table id (16 bytes) of a header or row key."""
    return key[1:_PK_LEN_AT]


def partition_key_of(key: bytes) -> bytes:
    """The partition key of a header or row key."""
    if key[:1] not in (HEADER, ROW) or len(key) < _PK_LEN_AT + 4:
        raise StoreError(f"{key.hex()} is neither a header nor a row key")
    start = _PK_LEN_AT + 4
    return key[start : start + _U32.unpack_from(key, _PK_LEN_AT)[0]]


def partition_order(partition_key: bytes) -> tuple[int, bytes]:
    """The order the store keeps partition keys in (length first, as the keys spell it)."""
    return len(partition_key), partition_key


def parse_row_key(key: bytes) -> tuple[uuid.UUID, bytes, bytes]:
    """Table id, partition key and clustering key of a row key."""
    if key[:1] != ROW or len(key) < _PK_LEN_AT + 4:
        raise StoreError(f"{key.hex()} is not a row key")
    end = _PK_LEN_AT + 4 + _U32.unpack_from(key, _PK_LEN_AT)[0]
    return uuid.UUID(bytes=key[1:_PK_LEN_AT]), key[_PK_LEN_AT + 4 : end], key[end:]


def due_key(at_s: int, table_id: bytes, partition_key: bytes, clustering_key: bytes | None) -> bytes:
    """The due-index entry of a row (``clustering_key``) or of the header (None)."""
    flag = b"\x00" if clustering_key is None else b"\x01"
    return DUE + _U64.pack(at_s) + _partition(table_id, partition_key) + flag + (clustering_key or b"")


def due_until(now_s: int) -> bytes:
    """The first due-index key after every entry due at or before ``now_s``."""
    return DUE + _U64.pack(now_s + 1)


def parse_due_key(key: bytes) -> tuple[int, uuid.UUID, bytes, bytes | None]:
    """Due second, table id, partition key and clustering key (None: the header) of an X key."""
    if key[:1] != DUE or len(key) < _DUE_PK_LEN_AT + 5:
        raise StoreError(f"{key.hex()} is not a due-index key")
    at_s = _U64.unpack_from(key, 1)[0]
    start = _DUE_PK_LEN_AT + 4
    end = start + _U32.unpack_from(key, _DUE_PK_LEN_AT)[0]
    flag = key[end]
    table_id = uuid.UUID(bytes=key[9:_DUE_PK_LEN_AT])
    if flag == DUE_HEADER:
        return at_s, table_id, key[start:end], None
    if flag == DUE_ROW:
        return at_s, table_id, key[start:end], key[end + 1 :]
    raise StoreError(f"due-index key {key.hex()} has the unknown flag {flag}")


def digest_key(digest: bytes) -> bytes:
    return DIGEST + digest


def digest_age_key(first_seen_ms: int, digest: bytes) -> bytes:
    return DIGEST_AGE + _U64.pack(first_seen_ms) + digest


def digest_age_key_of(key: bytes, first_seen: bytes) -> bytes:
    """The age key of the digest entry ``key`` -> ``first_seen`` (its stored u64 value)."""
    if len(first_seen) != _U64.size:
        raise StoreError(
            f"digest entry {key.hex()} has a {len(first_seen)}-byte value; a first-seen time takes 8"
        )
    return digest_age_key(_U64.unpack(first_seen)[0], key[len(DIGEST) :])


def digest_age_until(before_ms: int) -> bytes:
    """The first digest-age key after every digest first seen before ``before_ms``."""
    return DIGEST_AGE + _U64.pack(before_ms)


def parse_digest_age_key(key: bytes) -> tuple[int, bytes]:
    return _U64.unpack_from(key, 1)[0], key[9:]


def meta_key(name: str) -> bytes:
    return META + name.encode()


def prefix_end(prefix: bytes) -> bytes:
    """The smallest key greater than every key that starts with ``prefix``."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        raise StoreError(f"no key follows every key with prefix {prefix.hex()}")
    return stripped[:-1] + bytes((stripped[-1] + 1,))


def pack_u64(value: int) -> bytes:
    return _U64.pack(value)


def unpack_u64(data: bytes) -> int:
    return _U64.unpack(data)[0]
