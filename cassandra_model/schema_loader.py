"""Where table schemas come from: a CQL DDL file, a live node's system_schema, and the log itself.

* ``load_schema_from_cql``: CREATE KEYSPACE/TYPE/TABLE (+ the ALTER TABLE ADD/DROP a snapshot's schema.cql
  ends with). Tables must say ``WITH ID = <uuid>``, because mutations name tables by id only.
* ``load_schema_from_session``: plain CQL over system_schema through a cassandra-driver Session.
* ``schema_changes``: tells which (keyspace, table) a decoded ``system_schema`` mutation touched, so the
  agent knows to reload; ``system_schema_tables`` hard-codes those tables so such mutations decode.
"""

from __future__ import annotations

import calendar
import datetime as _dt
import hashlib
import logging
import os
import re
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cassandra_model.cql_types import CqlType, parse_cql_type
from cassandra_model.errors import SchemaError
from cassandra_model.partition_update import PartitionUpdate, split_composite_key
from cassandra_model.table_schema import (
    ClusteringOrder,
    ColumnKind,
    ColumnSchema,
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
# building a TableSchema from column descriptions (shared by the CQL and the session loaders)


@dataclass(slots=True)
class _ColumnDraft:
    name: str
    type: CqlType
    kind: ColumnKind = ColumnKind.REGULAR
    position: int = -1
    order: ClusteringOrder = ClusteringOrder.NONE


def _build_table(
    keyspace: str,
    table: str,
    table_id: uuid.UUID,
    columns: Iterable[_ColumnDraft],
    dropped: Iterable[DroppedColumn] = (),
    *,
    cdc: bool = False,
    gc_grace_seconds: int = 864000,
    is_counter: bool = False,
) -> TableSchema:
    def schema(c: _ColumnDraft, kind: ColumnKind) -> ColumnSchema:
        order = c.order if kind == ColumnKind.CLUSTERING else ClusteringOrder.NONE
        if kind == ColumnKind.CLUSTERING and order == ClusteringOrder.NONE:
            order = ClusteringOrder.ASC
        return ColumnSchema(c.name, kind, c.position if kind in _KEY_KINDS else -1, c.type, order)

    columns = list(columns)
    keys = {
        kind: sorted((c for c in columns if c.kind == kind), key=lambda c: c.position) for kind in _KEY_KINDS
    }
    statics = {
        c.name: schema(c, ColumnKind.STATIC)
        for c in sorted(columns, key=lambda c: c.name)
        if c.kind == ColumnKind.STATIC
    }
    regulars = {
        c.name: schema(c, ColumnKind.REGULAR)
        for c in sorted(columns, key=lambda c: c.name)
        if c.kind == ColumnKind.REGULAR
    }
    if statics and not keys[ColumnKind.CLUSTERING]:
        raise SchemaError(f"table {keyspace}.{table}: static columns need clustering columns")
    return TableSchema(
        keyspace=keyspace,
        table=table,
        table_id=table_id,
        partition_key=tuple(schema(c, ColumnKind.PARTITION_KEY) for c in keys[ColumnKind.PARTITION_KEY]),
        clustering=tuple(schema(c, ColumnKind.CLUSTERING) for c in keys[ColumnKind.CLUSTERING]),
        static_columns=statics,
        regular_columns=regulars,
        dropped_columns={d.name: d for d in dropped},
        cdc=cdc,
        gc_grace_seconds=gc_grace_seconds,
        is_counter=is_counter,
    )


_KEY_KINDS = (ColumnKind.PARTITION_KEY, ColumnKind.CLUSTERING)


# ---------------------------------------------------------------------------------------------------------
# CQL DDL files

_CQL_TOKEN = re.compile(
    r"""
    (?P<ws>\s+|--[^\n]*|//[^\n]*|/\*.*?\*/)
  | (?P<uuid>[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b)
  | (?P<num>-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<qident>"(?:[^"]|"")*")
  | (?P<string>'(?:[^']|'')*')
  | (?P<dollar>\$\$.*?\$\$)
  | (?P<sym>[(){}\[\]<>,;.=:+\-*/?!])
    """,
    re.VERBOSE | re.DOTALL,
)


@dataclass(slots=True)
class _Token:
    kind: str
    text: str
    line: int

    def word(self) -> str | None:
        """The upper-cased keyword, if this is an unquoted identifier."""
        return self.text.upper() if self.kind == "ident" else None

    def name(self) -> str:
        """An identifier's name: unquoted ones are case-insensitive (lower-cased)."""
        if self.kind == "qident":
            return self.text[1:-1].replace('""', '"')
        if self.kind == "ident":
            return self.text.lower()
        raise SchemaError(f"line {self.line}: expected a name, found {self.text!r}")


def _cql_tokens(text: str) -> list[_Token]:
    tokens = []
    pos = 0
    line = 1
    while pos < len(text):
        match = _CQL_TOKEN.match(text, pos)
        if match is None:
            raise SchemaError(f"line {line}: cannot read CQL at {text[pos : pos + 20]!r}")
        kind = match.lastgroup or ""
        if kind != "ws":
            tokens.append(_Token(kind, match.group(), line))
        line += match.group().count("\n")
        pos = match.end()
    return tokens


def _statements(tokens: list[_Token]) -> Iterator[list[_Token]]:
    current: list[_Token] = []
    for token in tokens:
        if token.kind == "sym" and token.text == ";":
            if current:
                yield current
            current = []
        else:
            current.append(token)
    if current:
        yield current


@dataclass(slots=True)
class _TableDraft:
    keyspace: str
    name: str
    line: int
    columns: dict[str, _ColumnDraft] = field(default_factory=dict)
    dropped: dict[str, DroppedColumn] = field(default_factory=dict)
    table_id: uuid.UUID | None = None
    cdc: bool = False
    gc_grace_seconds: int = 864000


class _Stream:
    """A cursor over one statement's tokens."""

    def __init__(self, tokens: list[_Token]) -> None:
        self.tokens = tokens
        self.index = 0

    @property
    def line(self) -> int:
        token = self.tokens[min(self.index, len(self.tokens) - 1)]
        return token.line

    def fail(self, why: str) -> SchemaError:
        return SchemaError(f"line {self.line}: {why}")

    def peek(self, offset: int = 0) -> _Token | None:
        i = self.index + offset
        return self.tokens[i] if i < len(self.tokens) else None

    def next(self) -> _Token:
        token = self.peek()
        if token is None:
            raise self.fail("statement ends too early")
        self.index += 1
        return token

    def at_word(self, *words: str) -> bool:
        for i, word in enumerate(words):
            token = self.peek(i)
            if token is None or token.word() != word:
                return False
        return True

    def accept_word(self, *words: str) -> bool:
        if self.at_word(*words):
            self.index += len(words)
            return True
        return False

    def expect_word(self, *words: str) -> None:
        if not self.accept_word(*words):
            raise self.fail(f"expected {' '.join(words)}")

    def at_symbol(self, symbol: str) -> bool:
        token = self.peek()
        return token is not None and token.kind == "sym" and token.text == symbol

    def expect_symbol(self, symbol: str) -> None:
        token = self.next()
        if token.kind != "sym" or token.text != symbol:
            raise self.fail(f"expected {symbol!r}, found {token.text!r}")

    def qualified_name(self, default_keyspace: str | None) -> tuple[str, str]:
        first = self.next().name()
        if self.at_symbol("."):
            self.index += 1
            return first, self.next().name()
        if default_keyspace is None:
            raise self.fail(f"{first!r} has no keyspace: write keyspace.{first} or add a USE statement")
        return default_keyspace, first

    def type_text(self) -> str:
        """The tokens of a CQL type, up to a ',' or ')' outside angle brackets or a column keyword."""
        parts = []
        depth = 0
        while True:
            token = self.peek()
            if token is None:
                break
            if token.kind == "sym" and token.text in ",)" and depth == 0:
                break
            if depth == 0 and token.word() in ("STATIC", "PRIMARY") and parts:
                break
            if token.kind == "sym" and token.text == "<":
                depth += 1
            elif token.kind == "sym" and token.text == ">":
                depth -= 1
            parts.append(token.text)
            self.index += 1
        if not parts:
            raise self.fail("expected a type")
        return " ".join(parts)

    def skip_value(self) -> list[_Token]:
        """An option value: everything up to AND at bracket depth 0."""
        out = []
        depth = 0
        while (token := self.peek()) is not None:
            if depth == 0 and token.word() == "AND":
                break
            if token.kind == "sym" and token.text in "({[":
                depth += 1
            elif token.kind == "sym" and token.text in ")}]":
                depth -= 1
            out.append(token)
            self.index += 1
        return out


class _CqlSchemaParser:
    def __init__(self, catalog: SchemaCatalog, id_for: Callable[[str, str], uuid.UUID] | None = None) -> None:
        self.catalog = catalog
        self.id_for = id_for
        self.keyspace: str | None = None
        self.tables: dict[tuple[str, str], _TableDraft] = {}

    def parse_type(self, text: str, keyspace: str, stream: _Stream) -> CqlType:
        try:
            return parse_cql_type(text, keyspace=keyspace, udts=self.catalog.udts)
        except SchemaError as exc:
            raise stream.fail(str(exc)) from exc

    def statement(self, tokens: list[_Token]) -> None:
        s = _Stream(tokens)
        if s.accept_word("USE"):
            self.keyspace = s.next().name()
        elif s.accept_word("CREATE", "TYPE"):
            self.create_type(s)
        elif s.accept_word("CREATE", "TABLE") or s.accept_word("CREATE", "COLUMNFAMILY"):
            self.create_table(s)
        elif s.accept_word("ALTER", "TABLE"):
            self.alter_table(s)
        elif s.at_word("CREATE", "MATERIALIZED", "VIEW"):
            log.warning(
                "line %d: materialized views are not loaded from CQL files; their mutations will be unknown",
                s.line,
            )
        # anything else (indexes, functions, roles, inserts...) does not affect decoding

    def create_type(self, s: _Stream) -> None:
        s.accept_word("IF", "NOT", "EXISTS")
        keyspace, name = s.qualified_name(self.keyspace)
        s.expect_symbol("(")
        names, types = [], []
        while True:
            names.append(s.next().name())
            types.append(s.type_text())
            if s.at_symbol(","):
                s.index += 1
                continue
            s.expect_symbol(")")
            break
        self.catalog.udts.define(keyspace, name, names, types)

    def create_table(self, s: _Stream) -> None:
        s.accept_word("IF", "NOT", "EXISTS")
        line = s.line
        keyspace, name = s.qualified_name(self.keyspace)
        draft = _TableDraft(keyspace, name, line)
        where = f"table {keyspace}.{name} (line {line})"
        s.expect_symbol("(")
        primary: tuple[list[str], list[str]] | None = None
        while True:
            if s.accept_word("PRIMARY", "KEY"):
                if primary is not None:
                    raise s.fail(f"{where}: two PRIMARY KEY definitions")
                primary = self.primary_key_clause(s)
            else:
                column = s.next().name()
                type_ = self.parse_type(s.type_text(), keyspace, s)
                kind = ColumnKind.REGULAR
                if s.accept_word("STATIC"):
                    kind = ColumnKind.STATIC
                if s.accept_word("PRIMARY", "KEY"):
                    if primary is not None:
                        raise s.fail(f"{where}: two PRIMARY KEY definitions")
                    primary = ([column], [])
                if column in draft.columns:
                    raise s.fail(f"{where}: column {column!r} defined twice")
                draft.columns[column] = _ColumnDraft(column, type_, kind)
            if s.at_symbol(","):
                s.index += 1
                if s.at_symbol(")"):
                    s.index += 1
                    break
                continue
            s.expect_symbol(")")
            break
        if primary is None:
            raise SchemaError(f"{where}: no PRIMARY KEY")
        for kind, names in zip(_KEY_KINDS, primary, strict=True):
            for position, column in enumerate(names):
                if column not in draft.columns:
                    raise SchemaError(f"{where}: key column {column!r} is not defined")
                col = draft.columns[column]
                if col.kind == ColumnKind.STATIC:
                    raise SchemaError(f"{where}: key column {column!r} cannot be static")
                col.kind, col.position = kind, position
        if s.accept_word("WITH"):
            self.table_options(s, draft, where)
        if draft.table_id is None and self.id_for is not None:
            draft.table_id = self.id_for(keyspace, name)
        if draft.table_id is None:
            raise SchemaError(
                f"{where} has no table id: add WITH ID = <uuid> (the id from system_schema.tables or the "
                "snapshot's schema.cql); the commit log names tables by id only"
            )
        self.tables[(keyspace, name)] = draft

    @staticmethod
    def primary_key_clause(s: _Stream) -> tuple[list[str], list[str]]:
        s.expect_symbol("(")
        if s.at_symbol("("):
            s.index += 1
            partition = [s.next().name()]
            while s.at_symbol(","):
                s.index += 1
                partition.append(s.next().name())
            s.expect_symbol(")")
        else:
            partition = [s.next().name()]
        clustering = []
        while s.at_symbol(","):
            s.index += 1
            clustering.append(s.next().name())
        s.expect_symbol(")")
        return partition, clustering

    def table_options(self, s: _Stream, draft: _TableDraft, where: str) -> None:
        while True:
            if s.accept_word("CLUSTERING", "ORDER", "BY"):
                s.expect_symbol("(")
                while True:
                    column = s.next().name()
                    order = ClusteringOrder.ASC
                    if s.accept_word("DESC"):
                        order = ClusteringOrder.DESC
                    else:
                        s.accept_word("ASC")
                    if column not in draft.columns:
                        raise s.fail(f"{where}: CLUSTERING ORDER names unknown column {column!r}")
                    draft.columns[column].order = order
                    if not s.at_symbol(","):
                        break
                    s.index += 1
                s.expect_symbol(")")
            elif s.accept_word("COMPACT", "STORAGE"):
                raise SchemaError(f"{where}: COMPACT STORAGE tables are not supported by the decoder")
            else:
                option = s.next().name()
                s.expect_symbol("=")
                value = s.skip_value()
                self.table_option(option, value, draft, where)
            if not s.accept_word("AND"):
                break
        extra = s.peek()
        if extra is not None:
            raise s.fail(f"{where}: unexpected {extra.text!r} after the table options")

    @staticmethod
    def table_option(option: str, value: list[_Token], draft: _TableDraft, where: str) -> None:
        text = " ".join(t.text for t in value)
        if option == "id":
            try:
                draft.table_id = uuid.UUID(text.strip("'"))
            except ValueError as exc:
                raise SchemaError(f"{where}: ID {text!r} is not a UUID") from exc
        elif option == "cdc":
            draft.cdc = text.strip("'").lower() == "true"
        elif option == "gc_grace_seconds":
            try:
                draft.gc_grace_seconds = int(text)
            except ValueError as exc:
                raise SchemaError(f"{where}: gc_grace_seconds {text!r} is not an integer") from exc

    def alter_table(self, s: _Stream) -> None:
        keyspace, name = s.qualified_name(self.keyspace)
        draft = self.tables.get((keyspace, name))
        if draft is None:
            raise s.fail(f"ALTER TABLE {keyspace}.{name}: the table is not created earlier in the file")
        if s.accept_word("DROP"):
            names = self.name_list(s)
            when = None
            if s.accept_word("USING", "TIMESTAMP"):
                when = int(s.next().text)
            for column in names:
                col = draft.columns.get(column)
                if col is None or col.kind in _KEY_KINDS:
                    raise s.fail(f"ALTER TABLE {keyspace}.{name} DROP {column}: no such non-key column")
                del draft.columns[column]
                kind = ColumnKind.STATIC if col.kind == ColumnKind.STATIC else ColumnKind.REGULAR
                dropped_at = when if when is not None else time.time_ns() // 1000
                draft.dropped[column] = DroppedColumn(column, col.type, dropped_at, kind)
        elif s.accept_word("ADD"):
            parenthesised = s.at_symbol("(")
            if parenthesised:
                s.index += 1
            while True:
                column = s.next().name()
                type_ = self.parse_type(s.type_text(), keyspace, s)
                kind = ColumnKind.STATIC if s.accept_word("STATIC") else ColumnKind.REGULAR
                draft.columns[column] = _ColumnDraft(column, type_, kind)
                if not (parenthesised and s.at_symbol(",")):
                    break
                s.index += 1
            if parenthesised:
                s.expect_symbol(")")
        # WITH / RENAME / ALTER ... TYPE do not change what the decoder needs (renames of key columns
        # do not change the layout), so they are ignored

    @staticmethod
    def name_list(s: _Stream) -> list[str]:
        if not s.at_symbol("("):
            return [s.next().name()]
        s.index += 1
        names = [s.next().name()]
        while s.at_symbol(","):
            s.index += 1
            names.append(s.next().name())
        s.expect_symbol(")")
        return names

    def finish(self) -> None:
        for draft in self.tables.values():
            assert draft.table_id is not None  # create_table refuses tables without an id
            counter = any(_is_counter_type(c.type) for c in draft.columns.values())
            table = _build_table(
                draft.keyspace,
                draft.name,
                draft.table_id,
                draft.columns.values(),
                draft.dropped.values(),
                cdc=draft.cdc,
                gc_grace_seconds=draft.gc_grace_seconds,
                is_counter=counter,
            )
            self.catalog.add(table)


def _is_counter_type(t: CqlType) -> bool:
    return t.cql() == "counter"


def load_schema_from_cql(
    text_or_path: str | os.PathLike[str], *, catalog: SchemaCatalog | None = None
) -> SchemaCatalog:
    """Tables and user types from CQL DDL (a file path, or the DDL text itself).

    Understands CREATE KEYSPACE/TYPE/TABLE, USE, and ALTER TABLE ADD/DROP [USING TIMESTAMP µs] (how a
    snapshot's schema.cql records dropped columns). Other statements are ignored. Every table needs
    ``WITH ID = <uuid>``; COMPACT STORAGE tables are rejected.
    """
    if isinstance(text_or_path, os.PathLike) or not re.search(r"[;(\n]", text_or_path):
        path = Path(text_or_path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise SchemaError(f"cannot read CQL schema file {path}: {exc}") from exc
    else:
        text = text_or_path
    catalog = catalog if catalog is not None else SchemaCatalog()
    parser = _CqlSchemaParser(catalog)
    for statement in _statements(_cql_tokens(text)):
        parser.statement(statement)
    parser.finish()
    return catalog


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


def load_schema_from_session(
    session: Any, keyspaces: Iterable[str] | None = None, *, with_system_schema: bool = True
) -> SchemaCatalog:
    """Every table (and view) of ``keyspaces`` (all when None) from system_schema, with plain CQL.

    COMPACT STORAGE (dense/super) tables are skipped with a warning; their mutations will then raise
    UnknownTableError. ``with_system_schema`` also registers the hard-coded system_schema tables so that
    schema-change mutations decode (see ``schema_changes``).
    """
    wanted = set(keyspaces) if keyspaces is not None else None

    def rows(query: str, names: tuple[str, ...] = ()) -> Iterator[dict[str, Any]]:
        for row in session.execute(query):
            values = _row_dict(row, names)
            if wanted is None or values["keyspace_name"] in wanted:
                yield values

    catalog = SchemaCatalog()
    type_names = ("keyspace_name", "type_name", "field_names", "field_types")
    for r in rows(f"SELECT {', '.join(type_names)} FROM system_schema.types", type_names):
        catalog.udts.define(
            r["keyspace_name"], r["type_name"], r["field_names"] or [], r["field_types"] or []
        )

    columns: dict[tuple[str, str], list[dict[str, Any]]] = {}
    column_names = (
        "keyspace_name",
        "table_name",
        "column_name",
        "clustering_order",
        "kind",
        "position",
        "type",
    )
    for r in rows(f"SELECT {', '.join(column_names)} FROM system_schema.columns", column_names):
        columns.setdefault((r["keyspace_name"], r["table_name"]), []).append(r)
    dropped: dict[tuple[str, str], list[dict[str, Any]]] = {}
    dropped_names = ("keyspace_name", "table_name", "column_name", "dropped_time", "kind", "type")
    # dropped_time read as milliseconds: Cassandra records system.local's dropped thrift_version at
    # Long.MAX_VALUE µs, a timestamp the driver cannot turn into a datetime (the whole query would fail)
    dropped_select = ", ".join(dropped_names).replace(
        "dropped_time", "blobAsBigint(timestampAsBlob(dropped_time)) AS dropped_time"
    )
    for r in rows(f"SELECT {dropped_select} FROM system_schema.dropped_columns", dropped_names):
        dropped.setdefault((r["keyspace_name"], r["table_name"]), []).append(r)

    found = [(r, r["table_name"]) for r in rows("SELECT * FROM system_schema.tables")]
    found += [(r, r["view_name"]) for r in rows("SELECT * FROM system_schema.views")]
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
        drafts.append(_ColumnDraft(c["column_name"], type_, kind, c["position"], order))
    dropped = []
    for d in dropped_rows:
        try:
            type_ = parse_cql_type(d["type"], keyspace=keyspace, udts=udts, multi_cell_tuples=True)
        except SchemaError as exc:
            raise SchemaError(f"{where}, dropped column {d['column_name']}: {exc}") from exc
        kind = ColumnKind.STATIC if d.get("kind") == "static" else ColumnKind.REGULAR
        dropped.append(DroppedColumn(d["column_name"], type_, _to_micros(d["dropped_time"]), kind))
    return _build_table(
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
    parser = _CqlSchemaParser(catalog, id_for=system_table_id)
    for statement in _statements(_cql_tokens(_SYSTEM_SCHEMA_CQL)):
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
