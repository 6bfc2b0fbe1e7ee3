"""REST: a row's image by primary key (with per-cell write time and TTL and the partition's tombstones),
a paginated scan of a table's rows in one raw partition's state (`/scan`), `/stats`, `/health` and
Prometheus `/metrics`.

A row request may land on any worker: it is forwarded to the worker that owns the raw-topic partition
of the row's partition key (the one whose state holds it). With `worker.web_token` set, every request
but `/health` needs `Authorization: Bearer <token>`.
"""

from __future__ import annotations

import hmac
import itertools
import json
import time
from typing import TYPE_CHECKING, Any

import faust
from faust.web import Request, Response, View
from yarl import URL

from app.key_parser import parse_primary_key
from cassandra_model.table_schema import TableSchema
from runtime.key_partition import key_partition
from runtime.secrets import Secret
from schemas.change_json import json_value_row
from schemas.raw_event import encode_raw_key
from state.cell_merge import Deletion
from state.row_image import cell_metadata, decode_row, partition_images, row_image
from state.store.partition_store import PartitionStore
from state.table_layout import clustering_key

if TYPE_CHECKING:
    from app.worker import Worker

MAX_ROWS = 1000
#: partitions one /scan page holds by default, and at most
SCAN_PAGE_PARTITIONS = 100
MAX_SCAN_PAGE_PARTITIONS = 1000


def _deletion(d: Deletion | None) -> dict[str, int] | None:
    if d is None:
        return None
    return {"timestamp": d.timestamp, "local_deletion_time": d.local_deletion_time}


def authorized(token: Secret | None, header: str) -> bool:
    """Whether an Authorization header is `Bearer <worker.web_token>` (any is, without a token); compared in
    constant time, so a wrong guess tells nothing about how much of it was right."""
    if token is None:
        return True
    return hmac.compare_digest(header.encode(), f"Bearer {token.reveal()}".encode())


def register_views(app: faust.App, worker: Worker) -> None:
    token = worker.settings.web_token

    def denied(view: View, request: Request) -> Response | None:
        if authorized(token, request.headers.get("Authorization", "")):
            return None
        return view.json({"error": "missing or wrong bearer token (worker.web_token)"}, status=401)

    async def served_elsewhere(view: View, request: Request, partition: int) -> Response | None:
        """The answer for a request about raw partition ``partition`` that this worker cannot serve: sent
        on to the partition's owner, or 503 while none owns it or it is being restored here; None when this
        worker serves it."""
        if partition not in worker.partitions.assigned and "routed" not in request.query:
            owner = worker.owners.owner(partition)
            if owner is None:
                return view.json(
                    {"error": f"no worker owns raw partition {partition} right now; retry"}, status=503
                )
            return await _forward(app, view, request, owner)
        if partition not in worker.partitions.ready:
            return view.json(
                {"error": f"raw partition {partition} is not ready on {worker.settings.worker_id}; retry"},
                status=503,
            )
        return None

    @app.page("/health")
    async def health(self: View, request: Request) -> Response:
        status, body = worker.health()
        return self.json(body, status=status)

    @app.page("/stats")
    async def stats(self: View, request: Request) -> Response:
        if (refused := denied(self, request)) is not None:
            return refused
        return self.json({"worker_id": worker.settings.worker_id, **worker.stats.document()})

    @app.page("/metrics")
    async def metrics(self: View, request: Request) -> Response:
        if (refused := denied(self, request)) is not None:
            return refused
        return self.bytes(worker.stats.prometheus(), content_type="text/plain; version=0.0.4")

    @app.page("/owners")
    async def owners(self: View, request: Request) -> Response:
        if (refused := denied(self, request)) is not None:
            return refused
        return self.json({"raw_topic": worker.config.kafka.raw_topic, "owners": worker.owners.table()})

    @app.page("/rows/{keyspace}/{table}")
    async def rows(self: View, request: Request, keyspace: str, table: str) -> Response:
        if (refused := denied(self, request)) is not None:
            return refused
        schema = worker.schemas.by_name(keyspace, table)
        if schema is None:
            return self.json({"error": f"table {keyspace}.{table} is not known to the workers"}, status=404)
        text = request.query.get("key")
        if text is None:
            return self.json({"error": 'give the primary key as ?key={"column": value, ...}'}, status=400)
        try:
            partition_key, clustering = parse_primary_key(schema, json.loads(text))
        except ValueError as exc:
            return self.json({"error": f"bad key for {keyspace}.{table}: {exc}"}, status=400)
        raw_key = encode_raw_key(schema.keyspace, schema.table, partition_key)
        partition = key_partition(raw_key, worker.config.kafka.raw_partitions)
        if (elsewhere := await served_elsewhere(self, request, partition)) is not None:
            return elsewhere
        return self.json(_row_document(worker, schema, partition, partition_key, clustering))

    @app.page("/scan/{keyspace}/{table}")
    async def scan(self: View, request: Request, keyspace: str, table: str) -> Response:
        """Every visible row of a table in one raw partition's state, a page of partitions at a time: what
        the state holds, whatever keys anyone asks for (a phantom row is found only this way)."""
        if (refused := denied(self, request)) is not None:
            return refused
        schema = worker.schemas.by_name(keyspace, table)
        if schema is None:
            return self.json({"error": f"table {keyspace}.{table} is not known to the workers"}, status=404)
        raw_partitions = worker.config.kafka.raw_partitions
        try:
            partition = int(request.query["partition"])
            limit = int(request.query.get("limit", SCAN_PAGE_PARTITIONS))
            after = bytes.fromhex(request.query["after"]) if "after" in request.query else None
            if not 0 <= partition < raw_partitions or not 1 <= limit <= MAX_SCAN_PAGE_PARTITIONS:
                raise ValueError("out of range")
        except (KeyError, ValueError):
            return self.json(
                {
                    "error": f"give ?partition=N (0..{raw_partitions - 1}), optionally &limit=N "
                    f"(1..{MAX_SCAN_PAGE_PARTITIONS}) and &after=<next of the previous page>"
                },
                status=400,
            )
        if (elsewhere := await served_elsewhere(self, request, partition)) is not None:
            return elsewhere
        page = scan_page(worker.partitions.store(partition), schema, after, limit, int(time.time()))
        return self.json({"served_by": worker.settings.worker_id, "raw_partition": partition, **page})


async def _forward(app: faust.App, view: View, request: Request, owner: str) -> Response:
    """Ask the owning worker (once: the forwarded request is marked, so it never bounces)."""
    url = URL(owner).with_path(request.path).with_query({**request.query, "routed": "1"})
    headers = {k: v for k, v in request.headers.items() if k.lower() == "authorization"}
    async with app.http_client.get(url, headers=headers) as response:
        return view.bytes(await response.read(), content_type=response.content_type, status=response.status)


def scan_page(
    store: PartitionStore, schema: TableSchema, after: bytes | None, limit: int, now_s: int
) -> dict[str, Any]:
    """Up to ``limit`` partitions of ``schema`` stored after the partition key ``after`` (None: from the
    first), with their visible rows (each with per-cell write time and TTL); ``next`` is the ``after`` of
    the next page, None after the last one."""
    keys = list(itertools.islice(store.partition_keys(schema.table_id, after), limit + 1))
    more = len(keys) > limit
    keys = keys[:limit]
    rows = []
    for partition_key in keys:
        state = store.read_partition(schema.table_id, partition_key)
        for image in partition_images(state, schema, now_s)[:MAX_ROWS]:
            rows.append(
                {
                    "values": json_value_row(schema, decode_row(image, schema)),
                    "cells": cell_metadata(image, now_s),
                }
            )
    return {
        "keyspace": schema.keyspace,
        "table": schema.table,
        "partitions": len(keys),
        "rows": rows,
        "next": keys[-1].hex() if more else None,
    }


def _row_document(
    worker: Worker,
    schema: TableSchema,
    partition: int,
    partition_key: bytes,
    clustering: tuple[bytes | None, ...] | None,
) -> dict[str, Any]:
    now_s = int(time.time())
    store = worker.partitions.store(partition)
    if clustering is not None and schema.clustering:
        key = clustering_key(schema, clustering)
        state = store.read_row(schema.table_id, partition_key, key)
        images = [image] if (image := row_image(state, key, schema, now_s)) is not None else []
        deleted_row = state.rows.get(key)
        row_deletion = _deletion(deleted_row.deletion) if deleted_row is not None else None
    else:
        state = store.read_partition(schema.table_id, partition_key)
        images = partition_images(state, schema, now_s)[:MAX_ROWS]
        row_deletion = None
    return {
        "keyspace": schema.keyspace,
        "table": schema.table,
        "served_by": worker.settings.worker_id,
        "raw_partition": partition,
        "rows": [
            {
                "values": json_value_row(schema, decode_row(image, schema)),
                "cells": cell_metadata(image, now_s),
            }
            for image in images
        ],
        "partition_deletion": _deletion(state.partition_deletion),
        "row_deletion": row_deletion,
        "range_tombstones": [
            {"start": start.hex(), "end": end.hex(), "deletion": _deletion(d)}
            for start, end, d in state.range_tombstones
        ],
    }
