"""Avro schemas of the events that flow between the parts, and their codecs."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from fastavro import parse_schema

SCHEMA_DIR = Path(__file__).resolve().parent


@cache
def load_avro_schema(name: str) -> Any:
    """A parsed schema from `schemas/<name>.avsc`, parsed once per process."""
    return parse_schema(json.loads((SCHEMA_DIR / f"{name}.avsc").read_text()))
