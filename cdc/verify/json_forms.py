"""The values the workload wrote, in the clean topics' JSON form, one comparable element at a time.

A statement writes Python values (the driver renders them as CQL literals); an image in the clean topic
holds JSON. To tell whether a value in an image was written, both sides are put in one form: a written
value is serialized with its column's type and decoded back (what Cassandra stores, and what the agent
reads from the commit log), then converted as the worker converts it (``schemas.change_json``).

A non-frozen collection or UDT is many cells, each written on its own (an append, a map put, a field
update), so it is compared element by element: a set or list element, a map entry, a UDT field. Every
other value is one element. Elements are canonical JSON text, so they can be put in sets.
"""

from __future__ import annotations

import json
from typing import Any

from cassandra_model.cql_types import CqlType, MapType, UserType
from cassandra_model.table_schema import TableSchema
from cassandra_model.value_serializer import serialize
from cdc.verify.workload.cell_write import ADD, FIELD, LIVENESS, SET
from cdc.verify.workload.random_values import Udt
from cdc.verify.workload.statement import Key
from schemas.change_json import json_converter

#: the element a row marker (an INSERT's liveness) is recorded as
ROW_MARKER = "<row marker>"


def canonical(value: Any) -> str:
    """A JSON value as text that is equal exactly when the values are."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def json_value(t: CqlType, value: Any) -> Any:
    """A written Python value in the clean topics' JSON form (None stays None)."""
    if value is None:
        return None
    if isinstance(value, Udt):
        value = value.as_dict()
    decoded = t.decode(serialize(t, value))
    convert = json_converter(t)
    return decoded if convert is None else convert(decoded)


def image_elements(t: CqlType, value: Any) -> list[str]:
    """The elements of a JSON value as an image shows it (none for null)."""
    if value is None:
        return []
    if not t.multi_cell:
        return [canonical(value)]
    if isinstance(t, MapType):
        pairs = value.items() if isinstance(value, dict) else value
        return [canonical([k, v]) for k, v in pairs]
    if isinstance(t, UserType):
        return [canonical([name, v]) for name, v in value.items() if v is not None]
    return [canonical(element) for element in value]


def written_elements(t: CqlType, mode: str, value: Any) -> list[str]:
    """The elements a write puts in a column: all of a whole value (SET), the ones added (ADD), one UDT
    field (FIELD); none for removals, deletions and nulls."""
    if mode in (SET, ADD):
        return image_elements(t, json_value(t, value))
    if mode == FIELD and isinstance(t, UserType):
        name, field_value = value
        if field_value is None:
            return []
        whole = json_value(t, {n: field_value if n == name else None for n in t.field_names})
        return [canonical([name, whole[name]])]
    if mode == LIVENESS:
        return [ROW_MARKER]
    return []


class TableForms:
    """One table's column types (dropped columns included: images from before a DROP hold them)."""

    def __init__(self, schema: TableSchema) -> None:
        self.schema = schema
        self.partition_columns = [c.name for c in schema.partition_key]
        self.clustering_columns = [c.name for c in schema.clustering]
        self.key_columns = frozenset(self.partition_columns + self.clustering_columns)
        self.static_columns = frozenset(c.name for c in schema.static_columns.values())
        self._types: dict[str, CqlType | None] = {}

    def column_type(self, name: str) -> CqlType | None:
        if name not in self._types:
            column = self.schema.column(name) or self.schema.header_column(name)
            self._types[name] = None if column is None else column.type
        return self._types[name]

    def key_json(self, key: Key) -> dict[str, Any]:
        """The named primary-key columns in JSON form."""
        out = {}
        for name, value in key:
            t = self.column_type(name)
            if t is None:
                raise ValueError(f"{self.schema.name} has no key column {name}")
            out[name] = json_value(t, value)
        return out

    def partition_of(self, key: dict[str, Any]) -> dict[str, Any]:
        return {name: key[name] for name in self.partition_columns}

    def is_static_only(self, key: dict[str, Any]) -> bool:
        """A partition's static-only row: its clustering columns are null."""
        return bool(self.clustering_columns) and all(key.get(c) is None for c in self.clustering_columns)
