"""Avro schemas of the events that flow between the parts, and their codecs."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

import cavro
from fastavro import parse_schema


def schema_json(name: str) -> Any:
    """`schemas/<name>.avsc` as JSON data. Read as package data, so it is found in a zip too (the Spark
    jobs ship the project's code to their executors as one)."""
    return json.loads(resources.files(__package__).joinpath(f"{name}.avsc").read_text())


@cache
def load_avro_schema(name: str) -> Any:
    """A parsed schema from `schemas/<name>.avsc` for fastavro, parsed once per process."""
    return parse_schema(schema_json(name))


@cache
def load_binary_codec(name: str) -> cavro.Schema:
    """A compiled binary codec of `schemas/<name>.avsc` whose records are dicts, built once per process.

    The raw events take this path (cavro): every agent writes them and every worker reads them, three
    copies per change, and it encodes and decodes them three times faster than fastavro's generic
    reader and writer (bench/raw_event_codec.md). The bytes are standard Avro either way."""
    return cavro.Schema(schema_json(name), options=cavro.Options(record_decodes_to_dict=True))
