"""All of the workers' state for one table, read over REST: every visible row of every raw partition.

Asking the workers for the keys Cassandra or the clean topic know would miss a row only the state holds
(a phantom nobody emitted). The workers' `/scan/<keyspace>/<table>?partition=N` pages through one raw
partition's store whichever worker is asked (it forwards to the owner); a partition that is moving
between workers answers 503 and is asked again.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import quote

from cassandra_model.table_schema import TableSchema
from runtime.service_process import ServiceProcess
from schemas.driver_rows import key_text


class StateScanError(RuntimeError):
    """The workers did not answer a scan in time, or answered with an error."""


def scan_table(
    workers: list[ServiceProcess], schema: TableSchema, raw_partitions: int, *, timeout_s: float = 120.0
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """(key text -> {"values", "cells"} of each visible row, keys found in more than one place).

    A key in two raw partitions (or twice in one) means two stores hold the row: reported, never merged."""
    names = [c.name for c in (*schema.partition_key, *schema.clustering)]
    path = f"/scan/{quote(schema.keyspace, safe='')}/{quote(schema.table, safe='')}"
    deadline = time.monotonic() + timeout_s
    rows: dict[str, dict[str, Any]] = {}
    twice: list[str] = []
    for partition in range(raw_partitions):
        after: str | None = None
        while True:
            query = f"?partition={partition}" + ("" if after is None else f"&after={after}")
            page = _page(workers, path + query, deadline)
            for row in page["rows"]:
                key = key_text({name: row["values"][name] for name in names})
                if key in rows:
                    twice.append(key)
                rows[key] = row
            after = page.get("next")
            if after is None:
                break
    return rows, twice


def _page(workers: list[ServiceProcess], path: str, deadline: float) -> dict[str, Any]:
    last: object = None
    turn = 0
    while time.monotonic() < deadline:
        worker = workers[turn % len(workers)]
        turn += 1
        got = worker.get_json(path, timeout_s=15)
        if got is not None and got[0] == 200 and isinstance(got[1], dict):
            return got[1]
        if got is not None and got[0] in (400, 401, 404):  # asked wrongly: asking again will not help
            raise StateScanError(f"{worker.name} answered {path} with {got[0]}: {got[1]}")
        last = got
        time.sleep(0.5)
    raise StateScanError(f"no worker answered {path} in time (last answer: {last})")
