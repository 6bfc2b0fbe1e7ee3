"""The system_schema keyspace: table schemas read from it, its own tables, and schema changes in the log.

* ``load_schema_from_session``: plain CQL over system_schema through a cassandra-driver Session.
* ``schema_changes``: tells which (keyspace, table) a decoded ``system_schema`` mutation touched, so the
  agent knows to reload; ``system_schema_tables`` hard-codes those tables (under the fixed ids of
  ``system_table_id``) so such mutations decode.
"""

from __future__ import annotations

import calendar
import datetime as _dt
import hashlib
import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from cassandra_model.cql_types import parse_cql_type
from cassandra_model.ddl_parser import ColumnDraft, CqlSchemaParser, build_table, cql_statements, cql_tokens
from cassandra_model.errors import SchemaError
from cassandra_model.partition_update import PartitionUpdate, split_composite_key
from cassandra_model.table_schema import (
    ClusteringOrder,
    ColumnKind,
    DroppedColumn,
    SchemaCatalog,
    TableSchema,
    UdtRegistry,
)

log = logging.getLogger(__name__)

SYSTEM_SCHEMA = "system_schema"


def system_table_id(keyspace: str, table: str) -> uuid.UUID:
    """TableId.forSystemTable: a name-based (MD5, version 3) UUID of the UTF-8 bytes ``keyspace + table``."""
    digest = bytearray(hashlib.md5((keyspace + table).encode("utf-8")).digest())
    digest[6] = (digest[6] & 0x0F) | 0x30
    digest[8] = (digest[8] & 0x3F) | 0x80
    return uuid.UUID(bytes=bytes(digest))


# ---------------------------------------------------------------------------------------------------------
# a live node's system_schema


def _row_dict(row: Any, names: tuple[str, ...] = ()) -> dict[str, Any]:
    """A driver row as a dict, whatever the session's row_factory (named tuple, dict or plain tuple)."""
    if isinstance(row, dict):
        return row
    if hasattr(row, "_asdict"):
        return dict(row._asdict())
    return dict(zip(names, row, strict=False))


def _to_micros(value: Any) -> int:
    """system_schema.dropped_columns.dropped_time (a timestamp, ms precision) in µs since the epoch."""
    if isinstance(value, _dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(_dt.UTC).replace(tzinfo=None)
        return calendar.timegm(value.timetuple()) * 1_000_000 + value.microsecond
    return int(value) * 1000


#: reads of system_schema before giving up on two in a row agreeing (a schema change landing meanwhile)
SCHEMA_READS = 5


def load_schema_from_session(
    session: Any, keyspaces: Iterable[str] | None = None, *, with_system_schema: bool = True
) -> SchemaCatalog:
    """Every table (and view) of ``keyspaces`` (all when None) from system_schema, with plain CQL.

    COMPACT STORAGE (dense/super) tables are skipped with a warning; their mutations will then raise
    UnknownTableError. ``with_system_schema`` also registers the hard-coded system_schema tables so that
    schema-change mutations decode (see ``schema_changes``).

    The tables are read until two reads in a row agree (SchemaError after SCHEMA_READS): a schema change
    is one mutation over several system_schema tables, applied table by table, so one read can see it
    half applied, e.g. a dropped column both in ``columns`` and in ``dropped_columns``, which reads as a
    column dropped and added again.
    """
    wanted = set(keyspaces) if keyspaces is not None else None
    rows = _read_schema_tables(session, wanted)
    for _ in range(SCHEMA_READS - 1):
        again = _read_schema_tables(session, wanted)
        if again == rows:
            break
        rows = again
    else:
        raise SchemaError(
            f"system_schema changed during each of {SCHEMA_READS} reads in a row (schema changes under way); "
            "read again once they settle"
        )
    catalog = SchemaCatalog()
    for r in rows["types"]:
        catalog.udts.define(
            r["keyspace_name"], r["type_name"], r["field_names"] or [], r["field_types"] or []
        )
    columns: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows["columns"]:
        columns.setdefault((r["keyspace_name"], r["table_name"]), []).append(r)
    dropped: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows["dropped_columns"]:
        dropped.setdefault((r["keyspace_name"], r["table_name"]), []).append(r)
    found = [(r, r["table_name"]) for r in rows["tables"]]
    found += [(r, r["view_name"]) for r in rows["views"]]
    for r, name in found:
        keyspace = r["keyspace_name"]
        flags = set(r.get("flags") or ())
        if flags & {"dense", "super"}:
            log.warning("skipping COMPACT STORAGE table %s.%s: not supported by the decoder", keyspace, name)
            continue
        table = _table_from_rows(
            catalog.udts,
            keyspace,
            name,
            r,
            columns.get((keyspace, name), []),
            dropped.get((keyspace, name), []),
        )
        catalog.replace(table)
    if with_system_schema:
        for table in system_schema_tables():
            if table.table_id not in catalog:
                catalog.add(table)
    return catalog


def _read_schema_tables(session: Any, wanted: set[str] | None) -> dict[str, list[dict[str, Any]]]:
    """One read of the system_schema tables a catalog is built from (rows of ``wanted`` keyspaces)."""

    def rows(query: str, names: tuple[str, ...] = ()) -> list[dict[str, Any]]:
        found = (_row_dict(row, names) for row in session.execute(query))
        return [values for values in found if wanted is None or values["keyspace_name"] in wanted]

    type_names = ("keyspace_name", "type_name", "field_names", "field_types")
    column_names = (
        "keyspace_name",
        "table_name",
        "column_name",
        "clustering_order",
        "kind",
        "position",
        "type",
    )
    dropped_names = ("keyspace_name", "table_name", "column_name", "dropped_time", "kind", "type")
    # dropped_time read as milliseconds: Cassandra records system.local's dropped thrift_version at
    # Long.MAX_VALUE µs, a timestamp the driver cannot turn into a datetime (the whole query would fail)
    dropped_select = ", ".join(dropped_names).replace(
        "dropped_time", "blobAsBigint(timestampAsBlob(dropped_time)) AS dropped_time"
    )
    return {
        "types": rows(f"SELECT {', '.join(type_names)} FROM system_schema.types", type_names),
        "columns": rows(f"SELECT {', '.join(column_names)} FROM system_schema.columns", column_names),
        "dropped_columns": rows(f"SELECT {dropped_select} FROM system_schema.dropped_columns", dropped_names),
        "tables": rows("SELECT * FROM system_schema.tables"),
        "views": rows("SELECT * FROM system_schema.views"),
    }


def _table_from_rows(
    udts: UdtRegistry,
    keyspace: str,
    name: str,
    table_row: dict[str, Any],
    column_rows: list[dict[str, Any]],
    dropped_rows: list[dict[str, Any]],
) -> TableSchema:
    where = f"table {keyspace}.{name}"
    drafts = []
    for c in column_rows:
        try:
            kind = ColumnKind(c["kind"])
            order = ClusteringOrder(c["clustering_order"] or "none")
            type_ = parse_cql_type(c["type"], keyspace=keyspace, udts=udts)
        except (ValueError, SchemaError) as exc:
            raise SchemaError(f"{where}, column {c['column_name']}: {exc}") from exc
        drafts.append(ColumnDraft(c["column_name"], type_, kind, c["position"], order))
    dropped = []
    for d in dropped_rows:
        try:
            type_ = parse_cql_type(d["type"], keyspace=keyspace, udts=udts, multi_cell_tuples=True)
        except SchemaError as exc:
            raise SchemaError(f"{where}, dropped column {d['column_name']}: {exc}") from exc
        kind = ColumnKind.STATIC if d.get("kind") == "static" else ColumnKind.REGULAR
        dropped.append(DroppedColumn(d["column_name"], type_, _to_micros(d["dropped_time"]), kind))
    return build_table(
        keyspace,
        name,
        table_row["id"],
        drafts,
        dropped,
        cdc=bool(table_row.get("cdc")),
        gc_grace_seconds=int(table_row.get("gc_grace_seconds") or 0),
        is_counter="counter" in set(table_row.get("flags") or ()),
    )


# ---------------------------------------------------------------------------------------------------------
# system_schema itself: hard-coded so that schema-change mutations in the log decode

_TABLE_PARAMS = """
    additional_write_policy text, allow_auto_snapshot boolean, bloom_filter_fp_chance double,
    caching frozen<map<text, text>>, cdc boolean, comment text, compaction frozen<map<text, text>>,
    compression frozen<map<text, text>>, crc_check_chance double, dclocal_read_repair_chance double,
    default_time_to_live int, extensions frozen<map<text, blob>>, gc_grace_seconds int, id uuid,
    incremental_backups boolean, max_index_interval int, memtable text, memtable_flush_period_in_ms int,
    min_index_interval int, read_repair text, read_repair_chance double, speculative_retry text,
"""

# The union of the columns 3.0, 4.0, 4.1 and 5.0 define (SchemaKeyspace): a mutation header lists only
# the columns it sets, so extra columns are harmless and one definition decodes every version.
_SYSTEM_SCHEMA_CQL = f"""
CREATE TABLE system_schema.keyspaces (keyspace_name text PRIMARY KEY, durable_writes boolean,
    replication frozen<map<text, text>>);
CREATE TABLE system_schema.tables (keyspace_name text, table_name text, {_TABLE_PARAMS}
    flags frozen<set<text>>, PRIMARY KEY ((keyspace_name), table_name));
CREATE TABLE system_schema.columns (keyspace_name text, table_name text, column_name text,
    clustering_order text, column_name_bytes blob, kind text, position int, type text,
    PRIMARY KEY ((keyspace_name), table_name, column_name));
CREATE TABLE system_schema.dropped_columns (keyspace_name text, table_name text, column_name text,
    dropped_time timestamp, kind text, type text, PRIMARY KEY ((keyspace_name), table_name, column_name));
CREATE TABLE system_schema.triggers (keyspace_name text, table_name text, trigger_name text,
    options frozen<map<text, text>>, PRIMARY KEY ((keyspace_name), table_name, trigger_name));
CREATE TABLE system_schema.views (keyspace_name text, view_name text, base_table_id uuid,
    base_table_name text, where_clause text, include_all_columns boolean, {_TABLE_PARAMS}
    PRIMARY KEY ((keyspace_name), view_name));
CREATE TABLE system_schema.types (keyspace_name text, type_name text, field_names frozen<list<text>>,
    field_types frozen<list<text>>, PRIMARY KEY ((keyspace_name), type_name));
CREATE TABLE system_schema.functions (keyspace_name text, function_name text,
    argument_types frozen<list<text>>, argument_names frozen<list<text>>, body text, language text,
    return_type text, called_on_null_input boolean, deterministic boolean, monotonic boolean,
    monotonic_on frozen<list<text>>, PRIMARY KEY ((keyspace_name), function_name, argument_types));
CREATE TABLE system_schema.aggregates (keyspace_name text, aggregate_name text,
    argument_types frozen<list<text>>, final_func text, initcond text, return_type text, state_func text,
    state_type text, deterministic boolean, PRIMARY KEY ((keyspace_name), aggregate_name, argument_types));
CREATE TABLE system_schema.indexes (keyspace_name text, table_name text, index_name text, kind text,
    options frozen<map<text, text>>, PRIMARY KEY ((keyspace_name), table_name, index_name));
CREATE TABLE system_schema.column_masks (keyspace_name text, table_name text, column_name text,
    function_keyspace text, function_name text, function_argument_types frozen<list<text>>,
    function_argument_values frozen<list<text>>, PRIMARY KEY ((keyspace_name), table_name, column_name));
"""


def system_schema_tables() -> list[TableSchema]:
    """The system_schema tables with their fixed ids (TableId.forSystemTable)."""
    catalog = SchemaCatalog()
    parser = CqlSchemaParser(catalog, id_for=system_table_id)
    for statement in cql_statements(cql_tokens(_SYSTEM_SCHEMA_CQL)):
        parser.statement(statement)
    parser.finish()
    return catalog.tables()


# ---------------------------------------------------------------------------------------------------------
# recognising schema changes in the log

# system_schema tables whose first clustering column names a table (or view) of the keyspace
_PER_TABLE = frozenset(
    {"tables", "columns", "dropped_columns", "triggers", "views", "indexes", "column_masks"}
)
# ... and those whose first clustering column names another keyspace-level object
_PER_OBJECT = frozenset({"types", "functions", "aggregates"})


@dataclass(frozen=True, slots=True)
class SchemaChange:
    """A schema object a system_schema mutation touched.

    ``table`` is None for keyspace-wide changes (the keyspace itself, a partition deletion or range
    deletion over all its tables); ``name`` is the type/function/aggregate name for those kinds.
    ``kind`` is the system_schema table the mutation wrote to.
    """

    keyspace: str
    table: str | None
    kind: str
    name: str | None = None


def schema_changes(update: PartitionUpdate) -> list[SchemaChange]:
    """The (keyspace, table) pairs a decoded system_schema partition update changes; [] for other tables."""
    if update.keyspace != SYSTEM_SCHEMA:
        return []
    kind = update.table
    keyspace = split_composite_key(update.partition_key, 1)[0].decode("utf-8")
    whole_keyspace = SchemaChange(keyspace, None, kind)
    if kind not in _PER_TABLE and kind not in _PER_OBJECT:
        return [whole_keyspace]
    out: dict[SchemaChange, None] = {}
    if update.partition_deletion is not None:
        out[whole_keyspace] = None
    prefixes = [r.clustering_raw for r in update.rows]
    prefixes += [m.clustering_raw for m in update.range_tombstones]
    for prefix in prefixes:
        if not prefix or prefix[0] is None:
            out[whole_keyspace] = None
            continue
        name = prefix[0].decode("utf-8")
        change = (
            SchemaChange(keyspace, name, kind)
            if kind in _PER_TABLE
            else SchemaChange(keyspace, None, kind, name)
        )
        out[change] = None
    return list(out)
