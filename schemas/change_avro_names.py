"""Avro names of CQL names (columns, fields, types, keyspaces, tables), and back; full names of Avro types.

A CQL name that matches ``[A-Za-z][A-Za-z0-9_]*`` is kept; any other (quoted identifiers with spaces,
dashes, non-ASCII letters, a leading ``_`` or digit) becomes ``_`` followed by each character, ASCII
letters and digits as they are and every other character as ``_<hex code point>_``: ``my-col`` ->
``_my_2d_col``, ``_id`` -> ``__5f_id``, ``1st`` -> ``_1st``. Kept names start with a letter and escaped
ones with ``_``, and the escape is decodable (``cql_name_of``), so two CQL names never meet.
"""

from __future__ import annotations

import re

_PLAIN_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")
_ESCAPED_PART = re.compile(r"[A-Za-z0-9]|_([0-9a-f]+)_")


def avro_name(name: str) -> str:
    """The Avro name of a CQL name (column, field, type, keyspace, table): see the module notes."""
    if _PLAIN_NAME.match(name):
        return name
    return "_" + "".join(c if c.isascii() and c.isalnum() else f"_{ord(c):x}_" for c in name)


def cql_name_of(name: str) -> str:
    """The CQL name an ``avro_name`` came from; ValueError for a name it cannot have produced."""
    if not name.startswith("_"):
        if not _PLAIN_NAME.match(name):
            raise ValueError(f"{name!r} is not an Avro name made by avro_name")
        return name
    out = []
    pos = 1
    while pos < len(name):
        match = _ESCAPED_PART.match(name, pos)
        if match is None:
            raise ValueError(f"{name!r} is not an Avro name made by avro_name")
        code = match.group(1)
        out.append(match.group(0) if code is None else chr(int(code, 16)))
        pos = match.end()
    return "".join(out)


def avro_fullname(name: str, namespace: str) -> str:
    """The full name of a named type referenced inside ``namespace`` (the writer and the reader resolve
    references to records defined earlier in a schema document by it)."""
    return name if "." in name or not namespace else f"{namespace}.{name}"
