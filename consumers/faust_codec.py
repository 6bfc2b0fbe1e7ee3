"""A Faust codec that reads clean-topic keys and values with the worker's own change codecs.

Faust decodes a record's bytes with a codec (``faust.serializers.codecs.Codec``) before it builds the
topic's ``key_type``/``value_type`` from the result. ``ChangeEventCodec`` is that codec for the clean
topics: it hands the bytes to ``decode_key``/``decode_value`` of the codec the worker encodes with
(``schemas.change_json.JsonChangeCodec``, ``schemas.change_connect_json.ConnectJsonChangeCodec`` whose
payloads it reads, ``schemas.change_avro.AvroChangeCodec`` with the schema registry), so a consumer gets
exactly the documented form of ``schemas.change_codec`` (``schemas.change_connect_json`` for
``json_schema``): the key dict and the envelope ``{before, after, op, source, ts_ms}``.

It only decodes: clean topics are written by the worker alone, and the Avro form cannot be written
without the table's schema.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

from faust.serializers import codecs
from faust.types.codecs import CodecT

from schemas.change_connect_json import ConnectJsonChangeCodec
from schemas.change_json import JsonChangeCodec

#: the worker's ``encoding`` settings this package reads
ENCODINGS = ("json", "json_schema", "avro")

Part = Literal["key", "value"]


class ChangeDecoder(Protocol):
    """The decoding half of ``schemas.change_codec.ChangeCodec``."""

    def decode_key(self, data: bytes) -> dict[str, Any]: ...

    def decode_value(self, data: bytes) -> dict[str, Any]: ...


def change_decoder(encoding: str, registry_url: str | None = None) -> ChangeDecoder:
    """The codec that decodes a deployment's clean topics: ``encoding`` and ``registry_url`` are the
    workers' ``worker.encoding`` and ``worker.schema_registry_url``."""
    if encoding == "json":
        return JsonChangeCodec()
    if encoding == "json_schema":
        return ConnectJsonChangeCodec()
    if encoding == "avro":
        if not registry_url:
            raise ValueError(
                "reading Avro clean topics needs the schema registry URL the workers write to "
                "(their worker.schema_registry_url)"
            )
        from schemas.change_avro import AvroChangeCodec
        from schemas.registry_client import HttpSchemaRegistryClient

        return AvroChangeCodec(HttpSchemaRegistryClient(registry_url))
    raise ValueError(f"clean-topic encoding {encoding!r} is not one of {', '.join(ENCODINGS)}")


class ChangeEventCodec(codecs.Codec):
    """Clean-topic key or value bytes (``part``) to their documented form, by a ``ChangeDecoder``.

    Pass an instance as a topic's ``key_serializer``/``value_serializer``, or register it under a name
    (``register_change_codecs``). A record that does not decode raises ``ChangeDecodingError``, which
    Faust hands to the stream as its ``KeyDecodeError``/``ValueDecodeError`` with the same message.
    """

    def __init__(
        self, children: tuple[CodecT, ...] | None = None, *, decoder: ChangeDecoder, part: Part = "value"
    ) -> None:
        if part not in ("key", "value"):
            raise ValueError(f"ChangeEventCodec part must be 'key' or 'value', not {part!r}")
        # the keyword arguments are kept by Faust's Codec, which rebuilds the codec from them when it is
        # chained (``codec | other``)
        super().__init__(children, decoder=decoder, part=part)
        self._decode = decoder.decode_key if part == "key" else decoder.decode_value

    def _loads(self, s: bytes) -> Any:
        return self._decode(s)

    def _dumps(self, s: Any) -> bytes:
        raise NotImplementedError(
            "ChangeEventCodec only decodes: clean topics are written by the CDC worker alone; to forward "
            "a change to a topic of your own, send its asdict() with another serializer (e.g. 'json')"
        )


def register_change_codecs(name: str, decoder: ChangeDecoder) -> tuple[str, str]:
    """Register the key and value codecs of ``decoder`` with Faust as ``<name>_key`` and ``<name>``, so
    topics can name them (``value_serializer="<name>"``); returns the two names."""
    key_name = f"{name}_key"
    codecs.register(key_name, ChangeEventCodec(decoder=decoder, part="key"))
    codecs.register(name, ChangeEventCodec(decoder=decoder, part="value"))
    return key_name, name
