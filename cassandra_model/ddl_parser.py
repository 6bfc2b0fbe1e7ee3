"""Table schemas from CQL DDL: ``load_schema_from_cql`` parses a DDL file or text into a SchemaCatalog.

It reads CREATE KEYSPACE/TYPE/TABLE (+ the ALTER TABLE ADD/DROP a snapshot's schema.cql ends with).
Tables must say ``WITH ID = <uuid>``, because mutations name tables by id only. ``build_table`` turns
column descriptions into a TableSchema for the session loader too (``cassandra_model.system_schema``),
which also parses the hard-coded system_schema tables with ``CqlSchemaParser``.
"""

from __future__ import annotations

import logging
import os
import re
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from cassandra_model.cql_types import CqlType, parse_cql_type
from cassandra_model.errors import SchemaError
from cassandra_model.table_schema import (
    ClusteringOrder,
    ColumnKind,
    ColumnSchema,
    DroppedColumn,
    SchemaCatalog,
    TableSchema,
)

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------------------
# building a TableSchema from column descriptions (shared by the CQL and the session loaders)


@dataclass(slots=True)
class ColumnDraft:
    name: str
    type: CqlType
    kind: ColumnKind = ColumnKind.REGULAR
    position: int = -1
    order: ClusteringOrder = ClusteringOrder.NONE


def build_table(
    keyspace: str,
    table: str,
    table_id: uuid.UUID,
    columns: Iterable[ColumnDraft],
    dropped: Iterable[DroppedColumn] = (),
    *,
    cdc: bool = False,
    gc_grace_seconds: int = 864000,
    is_counter: bool = False,
) -> TableSchema:
    def schema(c: ColumnDraft, kind: ColumnKind) -> ColumnSchema:
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


def cql_tokens(text: str) -> list[_Token]:
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


def cql_statements(tokens: list[_Token]) -> Iterator[list[_Token]]:
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
    columns: dict[str, ColumnDraft] = field(default_factory=dict)
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


class CqlSchemaParser:
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
                draft.columns[column] = ColumnDraft(column, type_, kind)
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
                draft.columns[column] = ColumnDraft(column, type_, kind)
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
            table = build_table(
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
    parser = CqlSchemaParser(catalog)
    for statement in cql_statements(cql_tokens(text)):
        parser.statement(statement)
    parser.finish()
    return catalog
