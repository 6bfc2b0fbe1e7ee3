"""CQL type strings (system_schema.columns.type, DDL, quoted Java class names) to CqlType objects."""

from __future__ import annotations

import re

from cassandra_model.cql_types.collection_types import ListType, MapType, SetType, VectorType
from cassandra_model.cql_types.cql_type import CqlType, UdtResolver
from cassandra_model.cql_types.native_kinds import MARSHAL_NATIVES
from cassandra_model.cql_types.record_types import TupleType, UserType
from cassandra_model.cql_types.scalar_types import NATIVE_TYPES, CustomType
from cassandra_model.errors import SchemaError

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
      | "(?P<qident>(?:[^"]|"")*)"
      | '(?P<string>(?:[^']|'')*)'
      | (?P<num>\d+)
      | (?P<sym>[<>,.])
    )""",
    re.VERBOSE,
)


def _tokenize(text: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            raise SchemaError(f"cannot parse CQL type {text!r} at character {pos}")
        kind = match.lastgroup or ""
        value = match.group(kind)
        if kind == "qident":
            value = value.replace('""', '"')
        elif kind == "string":
            value = value.replace("''", "'")
        tokens.append((kind, value))
        pos = match.end()
    return tokens


class _TypeParser:
    def __init__(
        self, text: str, keyspace: str | None, udts: UdtResolver | None, multi_cell_tuples: bool
    ) -> None:
        self.text = text
        self.tokens = _tokenize(text)
        self.index = 0
        self.keyspace = keyspace
        self.udts = udts
        self.multi_cell_tuples = multi_cell_tuples

    def fail(self, why: str) -> SchemaError:
        return SchemaError(f"cannot parse CQL type {self.text!r}: {why}")

    def next(self) -> tuple[str, str]:
        if self.index >= len(self.tokens):
            raise self.fail("unexpected end")
        token = self.tokens[self.index]
        self.index += 1
        return token

    def expect(self, symbol: str) -> None:
        kind, value = self.next()
        if kind != "sym" or value != symbol:
            raise self.fail(f"expected {symbol!r}, found {value!r}")

    def peek_symbol(self, symbol: str) -> bool:
        return (
            self.index < len(self.tokens)
            and self.tokens[self.index][0] == "sym"
            and self.tokens[self.index][1] == symbol
        )

    def parse(self) -> CqlType:
        result = self.parse_type()
        if self.index != len(self.tokens):
            raise self.fail(f"unexpected {self.tokens[self.index][1]!r}")
        return result

    def parse_type(self) -> CqlType:
        kind, value = self.next()
        if kind == "string":
            return _custom_type(value)
        if kind == "qident":
            return self.user_type(None, value)
        if kind != "ident":
            raise self.fail(f"unexpected {value!r}")
        lowered = value.lower()
        if lowered in NATIVE_TYPES and lowered != "empty" and not self.peek_symbol("<"):
            return NATIVE_TYPES[lowered]
        if lowered == "frozen":
            self.expect("<")
            inner = self.parse_type()
            self.expect(">")
            return inner.freeze()
        if lowered in ("list", "set"):
            self.expect("<")
            element = self.parse_type()
            self.expect(">")
            cls = ListType if lowered == "list" else SetType
            return cls(element, frozen=False)
        if lowered == "map":
            self.expect("<")
            key = self.parse_type()
            self.expect(",")
            val = self.parse_type()
            self.expect(">")
            return MapType(key, val, frozen=False)
        if lowered == "tuple":
            self.expect("<")
            elements = [self.parse_type()]
            while self.peek_symbol(","):
                self.index += 1
                elements.append(self.parse_type())
            self.expect(">")
            return TupleType(tuple(elements), multi_cell=self.multi_cell_tuples)
        if lowered == "vector":
            self.expect("<")
            element = self.parse_type()
            self.expect(",")
            kind, size = self.next()
            if kind != "num":
                raise self.fail(f"vector dimension must be a number, found {size!r}")
            self.expect(">")
            return VectorType(element, int(size))
        if self.peek_symbol("."):
            self.index += 1
            kind2, name = self.next()
            if kind2 not in ("ident", "qident"):
                raise self.fail(f"expected a type name after {value}.")
            keyspace = value if kind == "qident" else value.lower()
            return self.user_type(keyspace, name if kind2 == "qident" else name.lower())
        return self.user_type(None, lowered)

    def user_type(self, keyspace: str | None, name: str) -> UserType:
        keyspace = keyspace or self.keyspace
        if self.udts is None:
            raise self.fail(f"unknown type {name!r} (no user types are defined for keyspace {keyspace!r})")
        return self.udts.resolve_udt(keyspace, name)


def _custom_type(class_name: str) -> CqlType:
    short = class_name.rsplit(".", 1)[-1]
    if short in MARSHAL_NATIVES:
        return NATIVE_TYPES[MARSHAL_NATIVES[short]]
    return CustomType(class_name)


def parse_cql_type(
    text: str,
    *,
    keyspace: str | None = None,
    udts: UdtResolver | None = None,
    multi_cell_tuples: bool = False,
) -> CqlType:
    """Parse a CQL type string (system_schema.columns.type or DDL) into a CqlType.

    UDT names are resolved through ``udts`` in ``keyspace`` (or the ``ks.name`` given); an unknown UDT
    raises SchemaError. Quoted Java class names map to the native type they stand for, otherwise to an
    opaque CustomType. ``multi_cell_tuples`` reads a non-frozen ``tuple<...>`` as multi-cell, which is how
    system_schema.dropped_columns records a dropped non-frozen UDT.
    """
    return _TypeParser(text, keyspace, udts, multi_cell_tuples).parse()
