"""Every check of a converged run, table by table, against Cassandra's SELECT at ALL and the clients' writes.

Per table: the last image per key in the clean topic and every row of the workers' state (a full scan,
so a row only the state holds is a phantom) against ``SELECT *``; each key's chain of events (a lost,
repeated or no-op event breaks it); every event explained by the clients' writes (image_audit); events per
key within what the statements that touched it can cause, with no-op and duplicate events counted
(event_counts). A key held by two stores counts as a phantom: one of them should not hold it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cassandra_model.table_schema import TableSchema
from cdc.verify.event_counts import count_events
from cdc.verify.image_audit import ImageAudit, audit_images
from cdc.verify.ledger_index import LedgerIndex
from cdc.verify.oracle import (
    CleanEvent,
    by_key,
    chain_problems,
    compare,
    final_images,
    read_clean_topic,
    select_rows,
)
from cdc.verify.state_scan import scan_table
from runtime.config import KafkaConfig
from runtime.service_process import ServiceProcess
from schemas.change_json import JsonChangeCodec


@dataclass(slots=True)
class TableChecks:
    """What ``check_tables`` needs from the run."""

    kafka: KafkaConfig
    topic_of: Callable[[str], str]
    workers: list[ServiceProcess]
    raw_partitions: int
    index: LedgerIndex
    acks_ms: dict[int, float] = field(default_factory=dict)
    """Write timestamp (µs) -> when Cassandra acknowledged it (epoch ms): for the latency figures."""


def check_tables(session: Any, schemas: dict[str, TableSchema], run: TableChecks) -> dict[str, Any]:
    """The per-table section of the report and the run's totals."""
    codec = JsonChangeCodec()
    tables: dict[str, Any] = {}
    totals = Counter[str]()
    images = ImageAudit()
    latencies: list[float] = []
    for name, schema in sorted(schemas.items()):
        expected = select_rows(session, schema)
        events = read_clean_topic(run.kafka, run.topic_of(name), codec)
        histories = by_key(events)
        problems = [p for history in histories.values() for p in chain_problems(history)]
        columns = [c.name for c in schema.all_columns()]
        clean = compare(expected, final_images(events), columns)
        scanned, twice = scan_table(run.workers, schema, run.raw_partitions)
        state = compare(expected, {key: row["values"] for key, row in scanned.items()})
        audit = audit_images(name, events, run.index)
        counts = count_events(name, histories, run.index)
        tables[name] = {
            "rows": len(expected),
            "change_events": counts.change_events,
            "clean_topic": clean.summary(),
            "worker_state": {**state.summary(), "rows_held": len(scanned), "held_twice": twice[:5]},
            "history_problems": len(problems),
            "history_examples": problems[:5],
            "images": audit.summary(),
            "event_counts": counts.summary(),
        }
        images.add(audit)
        totals["lost"] += len(clean.lost) + len(state.lost)
        totals["phantom"] += len(clean.phantom) + len(state.phantom) + len(twice)
        totals["wrong"] += len(clean.wrong) + len(state.wrong)
        totals["history"] += len(problems)
        totals["change_events"] += counts.change_events
        totals["over_bound"] += len(counts.over_bound)
        totals["noops"] += len(counts.noops)
        totals["duplicates"] += len(counts.duplicates)
        latencies.extend(_latencies(events, run.acks_ms))
    latencies.sort()
    return {
        "lost": totals["lost"],
        "phantom": totals["phantom"],
        "wrong_values": totals["wrong"],
        "duplicate_or_spurious_events": totals["history"],
        "change_events": totals["change_events"],
        "explained_images": images.explained,
        "unexplained_images": images.unexplained,
        "unexplained_image_examples": images.examples[:10],
        "keys_over_bound": totals["over_bound"],
        "noop_events": totals["noops"],
        "duplicate_events": totals["duplicates"],
        "latencies_ms": latencies,
        "tables": tables,
    }


def _latencies(events: list[CleanEvent], acks_ms: dict[int, float]) -> list[float]:
    """Per acknowledged write: its first event's time minus its acknowledgement."""
    first_seen: dict[int, int] = {}
    for event in events:
        if event.value is None:
            continue
        written = event.value["source"].get("write_time_us")
        if written is not None and (written not in first_seen or event.timestamp_ms < first_seen[written]):
            first_seen[written] = event.timestamp_ms
    return [first_seen[t] - ack for t, ack in acks_ms.items() if t in first_seen]
