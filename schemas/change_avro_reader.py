"""Decoding Avro change events: Confluent framing, the writer's schema from the registry, CQL names back.

Framing is Confluent's: byte 0x00, the 4-byte big-endian schema id, the Avro body. The body is read with
fastavro and the writer's schema from the registry stripped of logical types (same binary form), so
values come back in the primitive form of the mapping in ``schemas.change_codec``, and record fields
under their CQL names again. (Python consumers reading the bytes with fastavro's logical types hit the
wall of Python's dates: fastavro raises on dates and timestamps outside years 1..9999. This decoder
does not.)
"""

from __future__ import annotations

import decimal
import io
import struct
from dataclasses import dataclass
from typing import Any

from fastavro import parse_schema, schemaless_reader

from schemas.change_avro_names import avro_fullname
from schemas.change_codec import ChangeDecodingError
from schemas.change_conversions import Converter
from schemas.registry_client import SchemaRegistryClient

#: Confluent framing: the magic byte 0, then the 4-byte big-endian schema id (the encoder writes it too)
CONFLUENT_FRAME = struct.Struct(">bI")
CONFLUENT_MAGIC = 0


def avro_decimal(value: dict[str, Any]) -> decimal.Decimal:
    """The Decimal of a decoded Avro ``cdc.change.Decimal`` record."""
    unscaled = int.from_bytes(value["unscaled"], "big", signed=True)
    return decimal.Decimal(unscaled).scaleb(-value["scale"], decimal.Context(prec=decimal.MAX_PREC))


def _strip_logical_types(schema: Any) -> Any:
    """The same schema without logical types: same binary form, values stay primitive."""
    if isinstance(schema, dict):
        return {k: _strip_logical_types(v) for k, v in schema.items() if k != "logicalType"}
    if isinstance(schema, list):
        return [_strip_logical_types(v) for v in schema]
    return schema


def _renamer(schema: Any, namespace: str, named: dict[str, Converter | None]) -> Converter | None:
    """A function giving decoded records their CQL field names (None: nothing to rename)."""
    if isinstance(schema, str):
        return named.get(avro_fullname(schema, namespace), named.get(schema))
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        if len(branches) != 1:
            return None
        inner = _renamer(branches[0], namespace, named)
        return None if inner is None else (lambda v: None if v is None else inner(v))
    kind = schema.get("type")
    if kind == "array":
        items = _renamer(schema["items"], namespace, named)
        return None if items is None else (lambda v: [items(x) for x in v])
    if kind == "map":
        values = _renamer(schema["values"], namespace, named)
        return None if values is None else (lambda v: {k: values(x) for k, x in v.items()})
    if kind == "record":
        fullname = avro_fullname(schema["name"], schema.get("namespace", namespace))
        inner_ns = fullname.rpartition(".")[0]
        named[fullname] = None  # no recursive types here
        fields = []
        work = False
        for field in schema["fields"]:
            name = field["name"]
            out = field.get("cql_name", name)
            sub = _renamer(field["type"], inner_ns, named)
            work = work or sub is not None or out != name
            fields.append((name, out, sub))
        if not work:
            return None

        def record(v: dict[str, Any]) -> dict[str, Any]:
            return {out: (v[name] if sub is None else sub(v[name])) for name, out, sub in fields}

        named[fullname] = record
        return record
    if isinstance(kind, dict | list):
        return _renamer(kind, namespace, named)
    return None


@dataclass(slots=True)
class _AvroReader:
    """How to read the bodies of one schema id: its parsed writer schema and the renamer of its records."""

    schema: Any
    rename: Converter | None


class AvroChangeReader:
    """Decodes Confluent-framed change-event keys and values, one fastavro reader per schema id (cached)."""

    def __init__(self, registry: SchemaRegistryClient) -> None:
        self.registry = registry
        self._readers: dict[int, _AvroReader] = {}

    def decode(self, data: bytes, what: str) -> dict[str, Any]:
        """A key or value (``what`` names which, for errors) in the documented form."""
        if len(data) < 5 or data[0] != CONFLUENT_MAGIC:
            raise ChangeDecodingError(
                f"change-event {what} is not in the Confluent wire format: {data[:16]!r}"
            )
        schema_id = CONFLUENT_FRAME.unpack_from(data)[1]
        reader = self._readers.get(schema_id)
        if reader is None:
            writer_schema = self.registry.get(schema_id)
            try:
                parsed = parse_schema(_strip_logical_types(writer_schema))
            except Exception as exc:
                raise ChangeDecodingError(f"schema id {schema_id} does not parse: {exc}") from exc
            reader = self._readers[schema_id] = _AvroReader(parsed, _renamer(writer_schema, "", {}))
        try:
            record = schemaless_reader(io.BytesIO(data[5:]), reader.schema, None)
        except Exception as exc:  # fastavro raises EOFError, ValueError, UnicodeDecodeError...
            raise ChangeDecodingError(
                f"change-event {what} does not decode with schema id {schema_id}: {exc}"
            ) from exc
        if not isinstance(record, dict):
            raise ChangeDecodingError(f"change-event {what} with schema id {schema_id} is not a record")
        return record if reader.rename is None else reader.rename(record)
