"""Rows as cassandra-driver returns them, in the clean topics' JSON form, and keys as comparable text.

The verifier compares Cassandra's ``SELECT`` with the clean topics, and the reconcile job compares it with
the lake: both turn a driver row into the same JSON image the change events carry
(``json_value_row``), so the two sides compare as plain JSON values. Clustering values are put in their
canonical form first, as the worker keeps them: Cassandra shows whichever of the equal spellings
(decimal ``1.50`` and ``1.5``) it kept, the clean topics always the canonical one
(``cassandra_model.cql_types.canonical_forms``).
"""

from __future__ import annotations

import json
from typing import Any

from cassandra_model.cql_types import CqlType
from cassandra_model.table_schema import TableSchema
from cassandra_model.value_serializer import serialize
from schemas.change_json import json_value_row


def key_text(key: dict[str, Any]) -> str:
    """A primary key as one comparable string (sorted JSON)."""
    return json.dumps(key, sort_keys=True)


def driver_value(t: CqlType, value: Any) -> Any:
    """A cassandra-driver value as the commit-log decoder gives it (the form json_value_row takes)."""
    return None if value is None else t.from_driver(value)


def canonical_value(t: CqlType, value: Any) -> Any:
    """A decoded value in its type's canonical form (see ``CqlType.canonical``)."""
    if value is None or t.byte_identical:
        return value
    return t.decode(t.canonical(serialize(t, value)))


def driver_row_image(schema: TableSchema, row: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(key text, image in the clean topics' JSON form) of one row as cassandra-driver returns it."""
    values = {c.name: driver_value(c.type, row.get(c.name)) for c in schema.all_columns()}
    for c in schema.clustering:
        values[c.name] = canonical_value(c.type, values[c.name])
    image = json_value_row(schema, values)
    return key_text({c.name: image[c.name] for c in (*schema.partition_key, *schema.clustering)}), image
