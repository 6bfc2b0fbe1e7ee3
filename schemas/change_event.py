"""Change events (worker -> clean topic ``<prefix>.<keyspace>.<table>``), independent of their encoding.

A change event is the Debezium envelope ``{before, after, op, source, ts_ms}``: ``before`` and ``after`` are
FULL row images (every column of the table, null when absent, static columns included; the static-only
row has null clustering columns), ``op`` is ``c``/``u``/``d`` (``r`` for bootstrap reads), ``source`` says
where the change came from and ``ts_ms`` when the worker emitted it. The Kafka key is the primary key
(partition key and clustering columns). Values here are the Python values ``state.decode_row`` gives
(UUID, datetime, Decimal, ...); ``schemas.change_codec`` turns them into JSON or Avro.

A delete is followed by a Kafka tombstone (same key, null value) so compaction forgets the row; build its
key with ``change_key`` and encode it with the codec's ``encode_key``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from cassandra_model.errors import ValueDecodeError
from cassandra_model.table_schema import TableSchema
from schemas import schema_json
from state.change import RowChange
from state.row_image import RowImage, decode_row, primary_key

#: Kafka's rule for topic names (``Topic.validate``): legal characters and at most 249 of them
_TOPIC_CHARS = re.compile(r"[A-Za-z0-9._-]+\Z")
MAX_TOPIC_LENGTH = 249

OPS = frozenset({"c", "u", "d", "r"})


class ChangeEventError(ValueError):
    """A change event that cannot be built or encoded: the message names the table (and column)."""


#: the envelope's ``source`` record (``schemas/change_source.avsc``): the Avro schema of ``as_dict``, and
#: the field list every other encoding's schema of it is made from
SOURCE_RECORD: dict[str, Any] = schema_json("change_source")

#: ``source.connector``, as Debezium's Cassandra connector names itself
CONNECTOR = "cassandra"


def _version() -> str:
    try:
        return metadata.version("cassandra-cdc")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "0+unknown"


#: ``source.version``: the version of this project that wrote the event
VERSION = _version()


@dataclass(slots=True)
class ChangeSource:
    """Where a change came from (the envelope's ``source``).

    ``write_time_us`` is the Cassandra write timestamp of the change (the raw event's newest cell or
    deletion); it may be None where there is none (an expiry, a bootstrap read of a bare key). ``node``,
    ``segment_id`` and ``offset`` locate the raw event in the originating node's commit log; bootstrap
    reads (``snapshot``) have none. ``expired`` marks a change made by TTLs running out rather than by a
    write, so consumers can tell an expiry from a delete. ``name`` is the clean-topic prefix, Debezium's
    logical server name.
    """

    cluster: str
    keyspace: str
    table: str
    write_time_us: int | None
    node: str | None
    segment_id: int | None
    offset: int | None
    snapshot: bool = False
    expired: bool = False
    name: str = "cdc"

    def as_dict(self, ts_ms: int) -> dict[str, Any]:
        """The envelope's ``source`` record (``schemas/change_source.avsc``), emitted at ``ts_ms``.

        Debezium's fields come first, so ``add.fields=source.ts_ms``, ``ExtractNewRecordState`` and
        dashboards built on Debezium find them: ``ts_ms`` is the write time in milliseconds (the emit time
        when the change has none, as Debezium stamps a snapshot read with the time it read), ``snapshot``
        is Debezium's string, ``db`` the keyspace. Ours follow: the exact write time in microseconds, and
        where in which node's commit log the change was read.
        """
        write_time_us = self.write_time_us
        return {
            "version": VERSION,
            "connector": CONNECTOR,
            "name": self.name,
            "ts_ms": ts_ms if write_time_us is None else write_time_us // 1000,
            "snapshot": "true" if self.snapshot else "false",
            "db": self.keyspace,
            "table": self.table,
            "cluster": self.cluster,
            "keyspace": self.keyspace,
            "write_time_us": write_time_us,
            "node": self.node,
            "segment_id": self.segment_id,
            "offset": self.offset,
            "expired": self.expired,
        }


def clean_topic_name(prefix: str, keyspace: str, table: str) -> str:
    """The clean topic of a table, ``<prefix>.<keyspace>.<table>``.

    Validated, never rewritten: a silently altered name could merge two tables into one topic. Kafka
    allows ASCII letters, digits, ``.``, ``_`` and ``-`` and at most 249 characters; the prefix may
    contain dots (``prod.cdc``), the keyspace and table may not (they would make topics ambiguous).
    """
    for what, part in (("prefix", prefix), ("keyspace", keyspace), ("table", table)):
        if not part or not _TOPIC_CHARS.match(part):
            raise ChangeEventError(
                f"clean topic for {keyspace}.{table}: {what} {part!r} must be non-empty and use only "
                "ASCII letters, digits, '.', '_' and '-' (Kafka's topic name rule)"
            )
        if what != "prefix" and "." in part:
            raise ChangeEventError(f"clean topic for {keyspace}.{table}: {what} {part!r} contains a '.'")
    if prefix.startswith(".") or prefix.endswith(".") or ".." in prefix:
        raise ChangeEventError(f"clean topic prefix {prefix!r} has an empty dot-separated part")
    topic = f"{prefix}.{keyspace}.{table}"
    if len(topic) > MAX_TOPIC_LENGTH:
        raise ChangeEventError(f"clean topic {topic!r} is longer than Kafka's {MAX_TOPIC_LENGTH} characters")
    return topic


def change_key(schema: TableSchema, image: RowImage | RowChange) -> dict[str, Any]:
    """The Kafka key of a row: partition key and clustering columns by CQL name (clustering columns are
    None for the static-only row). Given a RowChange, the key of its row (after, else before), which is
    also the key of the tombstone that follows a delete."""
    if isinstance(image, RowChange):
        row = image.after if image.after is not None else image.before
        if row is None:
            raise ChangeEventError(f"{schema.name}: a change with neither a before nor an after image")
        image = row
    try:
        return primary_key(image, schema)
    except ValueDecodeError as exc:
        raise ChangeEventError(f"{schema.name}: the primary key does not decode: {exc}") from exc


def envelope_key(schema: TableSchema, envelope: dict[str, Any]) -> dict[str, Any]:
    """``change_key`` of the change an envelope carries, read from its decoded row (after, else before)
    instead of decoding the key columns a second time."""
    row = envelope["after"] if envelope["after"] is not None else envelope["before"]
    key = {c.name: row[c.name] for c in schema.partition_key}
    for c in schema.clustering:
        key[c.name] = row[c.name]
    return key


_SHAPES = {"c": (False, True), "u": (True, True), "d": (True, False)}


def envelope_op(change: RowChange, schema: TableSchema, source: ChangeSource) -> str:
    """The envelope's ``op`` of a change, after checking the change has the images its op needs."""
    op = change.op
    shape = _SHAPES.get(op)
    if shape is None:
        raise ChangeEventError(f"{schema.name}: unknown change op {op!r} (expected c, u or d)")
    if shape != (change.before is not None, change.after is not None):
        raise ChangeEventError(
            f"{schema.name}: op {op!r} with before={'set' if change.before else 'None'}, "
            f"after={'set' if change.after else 'None'}"
        )
    return "r" if source.snapshot and op == "c" else op


def change_envelope(
    change: RowChange, schema: TableSchema, source: ChangeSource, ts_ms: int
) -> dict[str, Any]:
    """The Debezium envelope of one row change, with full row images as ``decode_row`` gives them.

    A ``snapshot`` source (a bootstrap read merged by a worker) turns a create into a read (``op`` ``r``).
    Other ops keep their letter with ``source.snapshot`` set: a bootstrap read completes a row live writes
    had already partly written (``u``), and a TTL'd cell whose expiry passed while the read travelled can
    even take a value or the row away (``u``, ``d``) - the change Cassandra made when it expired.
    """
    op = envelope_op(change, schema, source)
    try:
        before = None if change.before is None else decode_row(change.before, schema)
        after = None if change.after is None else decode_row(change.after, schema)
    except ValueDecodeError as exc:
        raise ChangeEventError(f"{schema.name}: a row image does not decode: {exc}") from exc
    return {"before": before, "after": after, "op": op, "source": source.as_dict(ts_ms), "ts_ms": ts_ms}
