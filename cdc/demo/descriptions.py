"""How a change event and a row's REST document read on the demo's screen."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any
from urllib.parse import quote

from cdc.demo.table import COLUMNS, KEY_COLUMNS, KEYSPACE, TABLE


def _clock(epoch_ms: float) -> str:
    return dt.datetime.fromtimestamp(epoch_ms / 1000).strftime("%H:%M:%S.%f")[:-3]


def _show(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, list):  # the set column
        return "{" + ", ".join(_show(v) for v in value) + "}"
    return str(value)


def _in_table_order(image: dict[str, Any]) -> list[str]:
    return [c for c in COLUMNS if c in image and c not in KEY_COLUMNS] + [
        c for c in image if c not in COLUMNS
    ]


def _columns(image: dict[str, Any]) -> str:
    return " ".join(f"{c}={_show(image[c])}" for c in _in_table_order(image) if image[c] is not None)


def describe_event(key: dict[str, Any], value: dict[str, Any]) -> str:
    """`op  key  change`: a create's after image, an update's changed columns, a delete's before image."""
    op, before, after = value["op"], value.get("before") or {}, value.get("after") or {}
    at = key.get("at")
    where = f"{key.get('sensor')} @ {_clock(at) if isinstance(at, int) else at}"
    if op == "u":
        change = ", ".join(
            f"{c}: {_show(before.get(c))} -> {_show(after.get(c))}"
            for c in _in_table_order(after)
            if before.get(c) != after.get(c)
        )
    elif op == "d":
        reason = "expired (TTL)" if (value.get("source") or {}).get("expired") else "deleted"
        change = f"{reason}, before: {_columns(before)}"
    else:
        change = _columns(after)
    return f"{op}  {where:<25} {change}"


def describe_rest(document: Any) -> list[str]:
    """A row's REST document in two lines: its values, then each cell's write time and TTL."""
    if not isinstance(document, dict):
        return [f"no answer: {document!r}"]
    if document.get("error"):
        return [f"error: {document['error']}"]
    rows = document.get("rows") or []
    if not rows:
        return [f"no live row (served by {document.get('served_by')})"]
    values, cells = rows[0]["values"], rows[0]["cells"]
    parts = []
    for column in _in_table_order(cells):
        infos = cells[column] if isinstance(cells[column], list) else [cells[column]]
        if not infos:
            continue
        count = f"[{len(infos)}]" if isinstance(cells[column], list) else ""
        text = f"{column}{count} writetime {_clock(max(i['writetime'] for i in infos) / 1000)}"
        if infos[0].get("ttl"):
            text += f" ttl {infos[0]['ttl']} s ({infos[0].get('remaining_ttl')} s left)"
        parts.append(text)
    return [
        f"values: {_columns(values)}   (served by {document.get('served_by')})",
        "cells:  " + "; ".join(parts),
    ]


def rest_path(row_key: tuple[str, int]) -> tuple[str, str]:
    """The row's REST path as shown (readable JSON) and as requested (URL-encoded)."""
    key = json.dumps({"sensor": row_key[0], "at": row_key[1]}, separators=(",", ":"))
    return f"/rows/{KEYSPACE}/{TABLE}?key={key}", f"/rows/{KEYSPACE}/{TABLE}?key={quote(key)}"
