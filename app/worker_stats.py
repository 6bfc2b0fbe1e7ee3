"""What the worker did with the raw events, per table: the `/stats` document and the Prometheus metrics.

Outcomes of one raw event: ``duplicate`` (its digest was seen: a replica copy or a redelivery), ``late``
(it changed nothing in the state: every cell lost last-write-wins or was already deleted), ``noop`` (the
state changed, no visible row did: a rewrite of the same values, a deletion of nothing), ``applied`` (at
least one change event), ``refused`` (a counter table with `counter_tables: refuse`).

What a batch did is counted once its transaction committed (``BatchTally``, added with ``add``): a batch
merged again after a failed attempt counts its events once, and an event taken out of a batch (sent to
the dead-letter topic after its merge failed half-way) counts only as a dead letter.

The lag behind the raw topic (records and ms, defined in app/consumer_lag.py) is computed when scraped or
asked for, never per event.
"""

from __future__ import annotations

import time
from collections import Counter as Tally
from dataclasses import dataclass, field
from typing import NamedTuple

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from app.consumer_lag import ConsumerLag

OUTCOMES = ("duplicate", "late", "noop", "applied", "refused")
#: why a raw record went to the dead-letter topic (the ``reason`` label of cdc_worker_dead_letters)
DEAD_LETTER_REASONS = ("undecodable", "unknown_table", "unknown_column", "merge_error", "expiry_error")


class TallyMark(NamedTuple):
    """Where a BatchTally stood (``BatchTally.mark``), to go back there (``rewind``)."""

    outcomes: int
    emitted: int
    natively: int
    expired: int
    newest_write_us: int | None


@dataclass(slots=True)
class BatchTally:
    """What one raw partition's share of a batch (or of an expiry) did, kept until its transaction
    commits: then ``WorkerStats.add`` counts it, else it is dropped with the transaction."""

    #: (table, outcome) per raw event
    outcomes: list[tuple[str, str]] = field(default_factory=list)
    #: (table, op) per change event
    emitted: list[tuple[str, str]] = field(default_factory=list)
    #: the table of each raw event the native core merged whole (``ChangeProcessor.merge_whole``)
    natively: list[str] = field(default_factory=list)
    expired_changes: int = 0
    digests_expired: int = 0
    dead_letters: list[str] = field(default_factory=list)
    #: newest write time (µs) of the raw events merged (None: none), for the lag figures
    newest_write_us: int | None = None

    def record(self, table: str, outcome: str) -> None:
        self.outcomes.append((table, outcome))

    def emitted_change(self, table: str, op: str) -> None:
        self.emitted.append((table, op))

    def merged_write(self, write_time_us: int) -> None:
        if self.newest_write_us is None or write_time_us > self.newest_write_us:
            self.newest_write_us = write_time_us

    def mark(self) -> TallyMark:
        return TallyMark(
            len(self.outcomes),
            len(self.emitted),
            len(self.natively),
            self.expired_changes,
            self.newest_write_us,
        )

    def rewind(self, mark: TallyMark) -> None:
        """Forget what was counted since ``mark`` (an event taken out of the batch)."""
        del self.outcomes[mark.outcomes :]
        del self.emitted[mark.emitted :]
        del self.natively[mark.natively :]
        self.expired_changes = mark.expired
        self.newest_write_us = mark.newest_write_us


@dataclass(slots=True)
class TableStats:
    events_in: int = 0
    outcomes: Tally[str] = field(default_factory=Tally)
    emitted: Tally[str] = field(default_factory=Tally)
    #: raw events the native core merged whole (the others that were merged took the Python merge)
    natively: int = 0

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
            "merged_natively": self.natively,
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
        natively = CounterMetricFamily(
            "cdc_worker_native_merges",
            "raw events the native core merged whole, by table (the other merged events took the Python "
            "merge: a null, a TTL, a deletion, a static or collection column, Avro change events)",
            labels=["table"],
        )
        for name, stats in sorted(self.tables.items()):
            for outcome, count in sorted(stats.outcomes.items()):
                events.add_metric([name, outcome], count)
            for op, count in sorted(stats.emitted.items()):
                changes.add_metric([name, op], count)
            natively.add_metric([name], stats.natively)
        return [events, changes, natively]


class _LagGauges(Collector):  # type: ignore[misc]
    """The lag figures as gauges, computed at each scrape (a figure not known yet has no sample)."""

    def __init__(self, lag: ConsumerLag) -> None:
        self.lag = lag

    def collect(self) -> list[GaugeMetricFamily]:
        figures = self.lag.observe(int(time.time() * 1000))
        records = GaugeMetricFamily(
            "cdc_worker_lag_records",
            "raw records not merged and committed yet: partition end (last fetch) minus committed offset",
            labels=["partition"],
        )
        for partition, behind in sorted(figures.records_behind.items()):
            if behind is not None:
                records.add_metric([str(partition)], behind)
        ms = GaugeMetricFamily(
            "cdc_worker_lag_ms",
            "ms the clean events are behind: 0 when no raw record waits, else now - max(newest merged write "
            "time, last time caught up)",
        )
        if figures.ms_behind is not None:
            ms.add_metric([], figures.ms_behind)
        newest = GaugeMetricFamily(
            "cdc_worker_newest_write_timestamp_seconds",
            "newest Cassandra write time of the raw events merged and committed since the worker started",
        )
        if figures.newest_write_ms is not None:
            newest.add_metric([], figures.newest_write_ms / 1000)
        known = GaugeMetricFamily(
            "cdc_worker_lag_known",
            "1 when every lag figure is known; 0 while one is not (no raw partition owned, Kafka not "
            "answering, a partition just assigned): the lag gauges then have no sample, never a 0",
        )
        known.add_metric([], 1 if figures.unknown is None else 0)
        return [records, ms, newest, known]


class WorkerStats:
    def __init__(self) -> None:
        self.started_at = time.time()
        self.tables: dict[str, TableStats] = {}
        r = self.registry = CollectorRegistry()
        r.register(_TableCounters(self.tables))
        self.lag = ConsumerLag()
        r.register(_LagGauges(self.lag))
        self.expired_changes = Counter(
            "cdc_worker_expiry_changes", "change events emitted because a TTL expired", registry=r
        )
        self.unknown_table_events = Counter(
            "cdc_worker_unknown_table_events",
            "raw events whose table schema never arrived on the schema topic (not processed)",
            registry=r,
        )
        self.dead_letters = Counter(
            "cdc_worker_dead_letters",
            "raw records sent to the dead-letter topic, by reason: undecodable (not a raw event), "
            "unknown_table (no schema), unknown_column (a column the schema never got), merge_error (the "
            "merge failed: a value, clustering or counter the state cannot take)",
            ["reason"],
            registry=r,
        )
        for reason in DEAD_LETTER_REASONS:
            self.dead_letters.labels(reason)
        self.dead_letter_counts: Tally[str] = Tally()
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
            "transactions that failed at begin, at a send or at the commit (each raw partition's own; "
            "retried while Kafka is away, the worker stops when fenced)",
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
        self.native_core = Gauge(
            "cdc_worker_native_core",
            "1 when the native (Rust) core reads the raw records' heads, 0 on the Python core",
            registry=r,
        )
        self.heartbeats = Counter(
            "cdc_worker_heartbeats", "heartbeat records committed (worker.heartbeat_interval_ms)", registry=r
        )
        self.heartbeats_committed = 0
        self.standby_partitions = Gauge(
            "cdc_worker_standby_partitions",
            "raw partitions this worker keeps a warm copy of without owning them (worker.standby_replicas)",
            registry=r,
        )
        self.standby_applied = Counter(
            "cdc_worker_standby_applied_changelog_records",
            "changelog records applied to the standby copies",
            registry=r,
        )
        #: the standby copies: which partitions, and the committed changelog records they have not applied
        #: (None: not known yet)
        self.standby_copies: list[int] = []
        self.standby_lag: int | None = None

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

    def add(self, tally: BatchTally) -> None:
        """Count what a committed transaction did."""
        for (table, outcome), count in Tally(tally.outcomes).items():
            stats = self._table(table)
            stats.events_in += count
            stats.outcomes[outcome] += count
        for (table, op), count in Tally(tally.emitted).items():
            self._table(table).emitted[op] += count
        for table, count in Tally(tally.natively).items():
            self._table(table).natively += count
        if tally.expired_changes:
            self.expired_changes.inc(tally.expired_changes)
        if tally.digests_expired:
            self.digests_expired.inc(tally.digests_expired)
        for reason, count in Tally(tally.dead_letters).items():
            self.dead_letters.labels(reason).inc(count)
            self.dead_letter_counts[reason] += count
            if reason == "unknown_table":
                self.unknown_table_events.inc(count)

    def heartbeat_committed(self) -> None:
        self.heartbeats_committed += 1
        self.heartbeats.inc()

    def document(self) -> dict[str, object]:
        totals = TableStats()
        for stats in self.tables.values():
            totals.events_in += stats.events_in
            totals.outcomes.update(stats.outcomes)
            totals.emitted.update(stats.emitted)
            totals.natively += stats.natively
        return {
            "uptime_s": round(time.time() - self.started_at, 1),
            "total": totals.as_dict(),
            "tables": {name: s.as_dict() for name, s in sorted(self.tables.items())},
            "lag": self.lag.observe(int(time.time() * 1000)).as_dict(),
            "heartbeats": self.heartbeats_committed,
            "dead_letters": {reason: self.dead_letter_counts[reason] for reason in DEAD_LETTER_REASONS},
            "standby": {"partitions": self.standby_copies, "lag": self.standby_lag},
        }

    def prometheus(self) -> bytes:
        return generate_latest(self.registry)
