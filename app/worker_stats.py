"""What the worker did with the raw events, per table: the `/stats` document and the Prometheus metrics.

Outcomes of one raw event: ``duplicate`` (its digest was seen: a replica copy or a redelivery), ``late``
(it changed nothing in the state: every cell lost last-write-wins or was already deleted), ``noop`` (the
state changed, no visible row did: a rewrite of the same values, a deletion of nothing), ``applied`` (at
least one change event), ``refused`` (a counter table with `counter_tables: refuse`).
"""

from __future__ import annotations

import time
from collections import Counter as Tally
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

OUTCOMES = ("duplicate", "late", "noop", "applied", "refused")


@dataclass(slots=True)
class TableStats:
    events_in: int = 0
    outcomes: Tally[str] = field(default_factory=Tally)
    emitted: Tally[str] = field(default_factory=Tally)

    def as_dict(self) -> dict[str, object]:
        return {
            "in": self.events_in,
            "duplicates": self.outcomes["duplicate"],
            "late": self.outcomes["late"],
            "noops": self.outcomes["noop"],
            "applied": self.outcomes["applied"],
            "refused": self.outcomes["refused"],
            "emitted": sum(self.emitted.values()),
            "emitted_by_op": dict(sorted(self.emitted.items())),
        }


class _TableCounters(Collector):  # type: ignore[misc]
    """The per-table tallies as Prometheus counters, read when scraped: a labelled Counter would cost a
    lookup and a lock per raw event, several percent of a worker's CPU."""

    def __init__(self, tables: dict[str, TableStats]) -> None:
        self.tables = tables

    def collect(self) -> list[CounterMetricFamily]:
        events = CounterMetricFamily(
            "cdc_worker_raw_events", "raw events consumed, by table and outcome", labels=["table", "outcome"]
        )
        changes = CounterMetricFamily(
            "cdc_worker_change_events", "change events emitted, by table and op", labels=["table", "op"]
        )
        for name, stats in sorted(self.tables.items()):
            for outcome, count in sorted(stats.outcomes.items()):
                events.add_metric([name, outcome], count)
            for op, count in sorted(stats.emitted.items()):
                changes.add_metric([name, op], count)
        return [events, changes]


class WorkerStats:
    def __init__(self) -> None:
        self.started_at = time.time()
        self.tables: dict[str, TableStats] = {}
        r = self.registry = CollectorRegistry()
        r.register(_TableCounters(self.tables))
        self.expired_changes = Counter(
            "cdc_worker_expiry_changes", "change events emitted because a TTL expired", registry=r
        )
        self.unknown_table_events = Counter(
            "cdc_worker_unknown_table_events",
            "raw events whose table schema never arrived on the schema topic (not processed)",
            registry=r,
        )
        self.batches = Histogram(
            "cdc_worker_batch_seconds",
            "time to merge a batch and commit its transaction",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=r,
        )
        self.sent_early = Counter(
            "cdc_worker_sent_early_records",
            "change records sent into a batch's transaction before its commit (a wide partition's changes)",
            registry=r,
        )
        self.transactions_failed = Counter(
            "cdc_worker_transactions_failed",
            "transactions that did not commit (the worker stops)",
            registry=r,
        )
        self.restored_records = Counter(
            "cdc_worker_restored_changelog_records",
            "changelog records applied while restoring state",
            registry=r,
        )
        self.digests_expired = Counter(
            "cdc_worker_digests_expired", "digests dropped after the dedup horizon", registry=r
        )
        self.partitions_assigned = Gauge(
            "cdc_worker_partitions_assigned", "raw-topic partitions assigned to this worker", registry=r
        )
        self.partitions_ready = Gauge(
            "cdc_worker_partitions_ready", "assigned partitions whose state is restored", registry=r
        )
        self.last_commit_time = Gauge(
            "cdc_worker_last_commit_timestamp_seconds", "when the last transaction committed", registry=r
        )

    def _table(self, name: str) -> TableStats:
        stats = self.tables.get(name)
        if stats is None:
            stats = self.tables[name] = TableStats()
        return stats

    def record(self, table: str, outcome: str) -> None:
        stats = self._table(table)
        stats.events_in += 1
        stats.outcomes[outcome] += 1

    def emitted(self, table: str, op: str) -> None:
        self._table(table).emitted[op] += 1

    def document(self) -> dict[str, object]:
        totals = TableStats()
        for stats in self.tables.values():
            totals.events_in += stats.events_in
            totals.outcomes.update(stats.outcomes)
            totals.emitted.update(stats.emitted)
        return {
            "uptime_s": round(time.time() - self.started_at, 1),
            "total": totals.as_dict(),
            "tables": {name: s.as_dict() for name, s in sorted(self.tables.items())},
        }

    def prometheus(self) -> bytes:
        return generate_latest(self.registry)
