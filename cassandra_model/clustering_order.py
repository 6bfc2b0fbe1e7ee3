"""Cassandra's clustering order as byte strings that sort the same way (a byte-comparable encoding).

Rows of a partition, range-tombstone bounds and collection elements are ordered by the clustering
types' own comparison (``ClusteringComparator``), not by their bytes. Here every clustering key and
every bound becomes one byte string whose plain unsigned byte order (memcmp, Python ``bytes`` order,
RocksDB's default comparator) IS Cassandra's order, so a sorted store keyed by these strings iterates
rows in clustering order and a range deletion is one key range.

Layout of a key: for each clustering column one component, then ``0x20``. A component is ``0x10`` for
null (nulls sort first in both directions, as ``compareComponent`` tests null before the type), or for
an empty value ``0x18`` (ASC) / ``0x28`` (DESC) (every type sorts an empty value first, ReversedType
last), or ``0x20`` followed by the value's encoding (bitwise inverted for DESC, which reverses a
prefix-free order). A bound on a prefix is the prefix's components followed by ``0x08`` ("before every
clustering that starts with the prefix": INCL_START, EXCL_END) or ``0x30`` ("after": EXCL_START,
INCL_END); a bound never equals a key, so containment is a strict comparison.

Value encodings are each type's ``order_encoder`` (documented in ``cassandra_model.cql_types.byte_order``,
with their limits); this module only lays them out as components, keys and bounds. Keys equate the
clusterings Cassandra compares equal (decimal ``1.0`` and ``1.00``); ``canonical`` gives such a clustering
the one serialized form a row shows (``cassandra_model.cql_types.canonical_forms``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from cassandra_model.cql_types import CqlType
from cassandra_model.cql_types.byte_order import INVERT
from cassandra_model.errors import ClusteringValueError
from cassandra_model.table_schema import ClusteringOrder, TableSchema

#: component markers
NULL = b"\x10"
EMPTY_ASC = b"\x18"
VALUE = b"\x20"
EMPTY_DESC = b"\x28"
#: bound suffixes and the terminator of a full key
BEFORE = b"\x08"
ROW_END = b"\x20"
AFTER = b"\x30"

#: ClusteringPrefix.Kind ordinals of range tombstone markers (see cassandra_model.partition_update)
EXCL_END_BOUND = 0
INCL_START_BOUND = 1
EXCL_END_INCL_START_BOUNDARY = 2
INCL_END_EXCL_START_BOUNDARY = 5
INCL_END_BOUND = 6
EXCL_START_BOUND = 7
_BEFORE_KINDS = frozenset((INCL_START_BOUND, EXCL_END_BOUND, EXCL_END_INCL_START_BOUNDARY))
_AFTER_KINDS = frozenset((EXCL_START_BOUND, INCL_END_BOUND, INCL_END_EXCL_START_BOUNDARY))

ComponentEncoder = Callable[[bytes | None], bytes]


def component_encoder(t: CqlType, descending: bool = False) -> ComponentEncoder:
    """One clustering component: null, empty or a value, in ASC or DESC (ReversedType) order."""
    encode = t.order_encoder()
    if descending:

        def component_desc(v: bytes | None) -> bytes:
            if v is None:
                return NULL
            if not v:
                return EMPTY_DESC
            return VALUE + encode(v).translate(INVERT)

        return component_desc

    def component(v: bytes | None) -> bytes:
        if v is None:
            return NULL
        if not v:
            return EMPTY_ASC
        return VALUE + encode(v)

    return component


def compare_values(t: CqlType, a: bytes | None, b: bytes | None, descending: bool = False) -> int:
    """Compare two serialized values of ``t`` as a clustering column of that order would (-1, 0, 1)."""
    encode = component_encoder(t, descending)
    ka, kb = encode(a), encode(b)
    return (ka > kb) - (ka < kb)


def is_byte_identical(t: CqlType) -> bool:
    """True when two values of ``t`` compare equal only if their bytes are equal (``t.byte_identical``)."""
    return t.byte_identical


# ---------------------------------------------------------------------------------------------------------
# clustering keys and bounds


class ClusteringKeyOrder:
    """Keys and bound positions for one table's clustering columns (types and ASC/DESC)."""

    __slots__ = ("_canonical", "_components", "size")

    def __init__(self, columns: Sequence[tuple[CqlType, bool]]) -> None:
        self._components = tuple(component_encoder(t, desc) for t, desc in columns)
        self.size = len(self._components)
        forms = tuple(t.canonical_form() for t, _ in columns)
        #: per column, its type's canonical form (None: a byte-identical type); None when all are
        self._canonical = forms if any(f is not None for f in forms) else None

    @classmethod
    def for_table(cls, schema: TableSchema) -> ClusteringKeyOrder:
        return cls([(c.type, c.clustering_order == ClusteringOrder.DESC) for c in schema.clustering])

    def _prefix(self, values: Sequence[bytes | None]) -> bytes:
        if len(values) > self.size:
            raise ClusteringValueError(f"{len(values)} clustering values for {self.size} clustering columns")
        return b"".join([enc(v) for enc, v in zip(self._components, values, strict=False)])

    def key(self, clustering: Sequence[bytes | None]) -> bytes:
        """The byte-comparable key of a row's full clustering."""
        if len(clustering) != self.size:
            raise ClusteringValueError(
                f"a row has {len(clustering)} clustering values, the table {self.size} clustering columns"
            )
        if self.size == 1:
            return self._components[0](clustering[0]) + ROW_END
        return self._prefix(clustering) + ROW_END

    def canonical(self, clustering: tuple[bytes | None, ...]) -> tuple[bytes | None, ...]:
        """A full clustering with each value in its type's canonical form, so that the bytes a row keeps
        (its Kafka key, its images) depend on which row it is, never on which of the equal spellings a
        write used. The same tuple when no clustering type has two spellings of one value."""
        forms = self._canonical
        if forms is None:
            return clustering
        return tuple(
            v if form is None or not v else form(v) for form, v in zip(forms, clustering, strict=True)
        )

    def bound(self, kind: int, prefix: Sequence[bytes | None]) -> bytes:
        """The position of a range-tombstone bound (ClusteringPrefix.Kind ordinal) on a prefix.

        An empty prefix with a start kind is the bottom, with an end kind the top of the partition.
        """
        if kind in _BEFORE_KINDS:
            return self._prefix(prefix) + BEFORE
        if kind in _AFTER_KINDS:
            return self._prefix(prefix) + AFTER
        raise ClusteringValueError(f"{kind} is not a range tombstone bound kind")

    def compare(self, a: Sequence[bytes | None], b: Sequence[bytes | None]) -> int:
        """Compare two full clusterings (-1, 0, 1)."""
        ka, kb = self.key(a), self.key(b)
        return (ka > kb) - (ka < kb)

    def in_range(
        self,
        clustering: Sequence[bytes | None],
        start_kind: int,
        start: Sequence[bytes | None],
        end_kind: int,
        end: Sequence[bytes | None],
    ) -> bool:
        """Whether a range deletion between those two bounds covers the row at ``clustering``."""
        return self.bound(start_kind, start) < self.key(clustering) < self.bound(end_kind, end)
