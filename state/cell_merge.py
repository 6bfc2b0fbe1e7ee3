"""Versions of one cell, one row liveness and one deletion, and which version Cassandra keeps.

These are the leaves of the merge: everything above them (rows, partitions) only decides which versions
meet. The rules are Cassandra's read path (``Cells.reconcile``, ``LivenessInfo.supersedes``,
``DeletionTime.supersedes``). Each is turned into a TOTAL order, so that the merge is commutative even
where Cassandra's own rule leaves a tie between two different versions: after Cassandra's criteria, ties
are broken on fields that Cassandra would also have compared equal (TTL, path, flags), which changes no
visible value.

Not modelled: compaction turns an expired cell into a tombstone (local deletion time = expiry - TTL).
Cassandra's answer to an equal-timestamp contest between an expired cell and another expiring cell can
therefore change once compaction ran (before: the later expiry wins; after: the tombstone wins); the merge
here always answers as before compaction. Values compare as unsigned bytes, as 4.0+ does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: commit-log cell flags kept in raw events (4 = empty value is derivable from the bytes and dropped)
TOMBSTONE = 0x01
EXPIRING = 0x02
#: Integer.MAX_VALUE: a live cell's "no deletion time"; also LivenessInfo's "no expiration"
NO_DELETION_TIME = 2**31 - 1
#: LivenessInfo.EXPIRED_LIVENESS_TTL: a liveness that is expired from the start (materialized views)
EXPIRED_LIVENESS_TTL = 2**31 - 1


@dataclass(frozen=True, slots=True, order=True)
class Deletion:
    """A tombstone: deletes every cell and liveness whose timestamp is <= ``timestamp`` (µs).

    The field order makes ``<`` Cassandra's ``supersedes`` (higher timestamp, then later local deletion
    time); ``local_deletion_time`` (s) only decides when the tombstone may be purged.
    """

    timestamp: int
    local_deletion_time: int

    def deletes(self, timestamp: int) -> bool:
        return timestamp <= self.timestamp


@dataclass(frozen=True, slots=True)
class Liveness:
    """A row's primary-key liveness (the INSERT row marker): timestamp, TTL (0: none) and expiry (s)."""

    timestamp: int
    ttl: int = 0
    local_expiration_time: int | None = None

    @property
    def is_expiring(self) -> bool:
        return self.ttl != 0

    @property
    def is_expired_marker(self) -> bool:
        """A liveness written as already expired (TTL Integer.MAX_VALUE), never live."""
        return self.ttl == EXPIRED_LIVENESS_TTL

    def is_live(self, now_s: int) -> bool:
        if self.ttl == 0:
            return True
        if self.ttl == EXPIRED_LIVENESS_TTL:
            return False
        expiry = self.local_expiration_time
        return expiry is None or now_s < expiry

    def expires_at(self) -> int | None:
        """When a live expiring liveness stops being live (s), else None."""
        if self.ttl == 0 or self.ttl == EXPIRED_LIVENESS_TTL:
            return None
        return self.local_expiration_time

    def purge_time(self) -> int | None:
        """The local deletion time used for gc_grace, or None when this liveness never becomes dead."""
        if self.ttl == 0:
            return None
        return self.local_expiration_time if self.local_expiration_time is not None else NO_DELETION_TIME


@dataclass(slots=True)
class Cell:
    """One version of a cell; ``value`` is the serialized value (a CounterContext for counters).

    ``path`` is the element key of a complex (collection/UDT) cell, None for a simple cell.
    ``local_deletion_time`` is the deletion time of a tombstone, the expiry of an expiring cell, and
    NO_DELETION_TIME for a live cell. Treat instances as immutable: merges replace, never edit, them.
    """

    timestamp: int
    ttl: int
    local_deletion_time: int
    flags: int
    value: bytes
    path: bytes | None = None

    @property
    def is_tombstone(self) -> bool:
        return bool(self.flags & TOMBSTONE)

    @property
    def is_expiring(self) -> bool:
        return bool(self.flags & EXPIRING)

    def is_live(self, now_s: int) -> bool:
        """Live now: not a tombstone, and not an expiring cell at or past its expiry."""
        flags = self.flags
        if flags & TOMBSTONE:
            return False
        return not flags & EXPIRING or now_s < self.local_deletion_time

    def expires_at(self) -> int | None:
        """When an expiring cell becomes a tombstone (s); None for live and tombstone cells."""
        return self.local_deletion_time if self.flags & EXPIRING and not self.flags & TOMBSTONE else None

    def purge_time(self) -> int | None:
        """The local deletion time gc_grace counts from; None for a plain live cell."""
        return self.local_deletion_time if self.flags & (TOMBSTONE | EXPIRING) else None


def cell_from_record(record: dict[str, Any]) -> Cell:
    """A Cell from a raw event's cell record (flags reduced to tombstone/expiring)."""
    flags = record["flags"] & (TOMBSTONE | EXPIRING)
    value = record["value"]
    return Cell(
        record["timestamp"],
        record["ttl"] if flags & EXPIRING else 0,
        record["local_deletion_time"] if flags else NO_DELETION_TIME,
        flags,
        value if isinstance(value, bytes) else bytes(value),
        record.get("path"),
    )


def deletion_from_record(record: dict[str, Any] | None) -> Deletion | None:
    if record is None:
        return None
    return Deletion(record["timestamp"], record["local_deletion_time"])


def liveness_from_record(record: dict[str, Any] | None) -> Liveness | None:
    if record is None:
        return None
    ttl = record["ttl"] or 0
    return Liveness(record["timestamp"], ttl, record.get("local_expiration_time") if ttl else None)


def compare_cells(a: Cell, b: Cell) -> int:
    """Cassandra's reconcile order of two versions of one regular cell (>0: ``a`` wins, 0: identical).

    Higher timestamp wins. On equal timestamps a tombstone or expiring cell beats a live cell; a
    tombstone beats an expiring cell; between two of the same kind the larger local deletion time wins;
    then the greater value (unsigned bytes). Then, for a total order, TTL, path and flags.
    """
    if a.timestamp != b.timestamp:
        return 1 if a.timestamp > b.timestamp else -1
    a_dead = a.flags & (TOMBSTONE | EXPIRING)
    b_dead = b.flags & (TOMBSTONE | EXPIRING)
    if a_dead or b_dead:
        if bool(a_dead) != bool(b_dead):
            return 1 if a_dead else -1
        a_tomb = a.flags & TOMBSTONE
        if a_tomb != b.flags & TOMBSTONE:
            return 1 if a_tomb else -1
        if a.local_deletion_time != b.local_deletion_time:
            return 1 if a.local_deletion_time > b.local_deletion_time else -1
    if a.value != b.value:
        return 1 if a.value > b.value else -1
    if a.ttl != b.ttl:
        return 1 if a.ttl > b.ttl else -1
    if a.path != b.path:
        return 1 if (a.path or b"") > (b.path or b"") else -1
    if a.flags != b.flags:
        return 1 if a.flags > b.flags else -1
    return 0


def reconcile(a: Cell, b: Cell) -> Cell:
    """The version of a regular (non-counter) cell that Cassandra keeps of ``a`` and ``b``."""
    return a if compare_cells(a, b) >= 0 else b


def _liveness_rank(x: Liveness) -> tuple[int, bool, bool, int, int]:
    expiring = x.ttl != 0
    expiry = x.local_expiration_time if expiring and x.local_expiration_time is not None else NO_DELETION_TIME
    return (x.timestamp, x.ttl == EXPIRED_LIVENESS_TTL, expiring, expiry, x.ttl)


def liveness_supersedes(a: Liveness, b: Liveness) -> bool:
    """``LivenessInfo.supersedes``: higher timestamp; then an expired marker; then the larger expiry
    when both or neither expire, else the expiring one. TTL breaks what is left, for a total order."""
    return _liveness_rank(a) > _liveness_rank(b)


def reconcile_liveness(a: Liveness | None, b: Liveness | None) -> Liveness | None:
    if a is None:
        return b
    if b is None:
        return a
    return a if _liveness_rank(a) >= _liveness_rank(b) else b


def max_deletion(a: Deletion | None, b: Deletion | None) -> Deletion | None:
    """The deletion that supersedes (None = no deletion)."""
    if a is None:
        return b
    if b is None:
        return a
    return a if a >= b else b
