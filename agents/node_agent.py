"""The node agent: cdc_raw segments to the raw Kafka topic, durably, without ever losing a write.

Each cycle lists cdc_raw (segments in id order), reads every segment from where it stopped up to the
durable offset in its `_cdc.idx`, publishes one raw event per partition update of a captured CDC table,
saves per-segment offsets once Kafka acknowledged everything before them, and releases (deletes or
archives) a segment only when it is COMPLETED, read to its end and fully acknowledged. Unreadable data
is quarantined with a report and reading goes on.

Segments Cassandra deleted before they were read (`cdc_block_writes: false` and a full cdc_raw) are found
by comparing each listing with what the agent saw before (agents.gap_detector, the ledger survives
restarts): each gap is logged, counted, published to `<raw_topic>.gaps` and keeps /health "degraded" until
an operator acknowledges it (POST /gaps/acknowledge). The agent goes on with the segments that are left.

At start, a Cassandra or Kafka that refuses the agent for a reason the config must fix (credentials, TLS,
key files) ends it with AccessError naming the key (`cdc agent` prints it and exits non-zero) before any
segment is read: after the fix a restart goes on from the saved offsets.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.ack_tracker import AckTracker
from agents.cdc_raw import CdcSegment, list_cdc_segments, list_orphan_indexes
from agents.commitlog.errors import CommitLogError, MutationDecodeError
from agents.commitlog.log_reader import SegmentDecoder, StopBeforeEntry
from agents.commitlog.native_core import (
    AVAILABLE,
    EventBatch,
    NativeCatalog,
    NativeSegmentDecoder,
    TableMode,
)
from agents.errors import ACCESS_REFUSALS_BEFORE_EXIT, AccessError
from agents.gap_detector import GapDetector
from agents.health_server import HealthServer
from agents.metrics import AgentMetrics
from agents.offset_store import OffsetStore
from agents.publisher import RawPublisher
from agents.quarantine import Problem, Quarantine
from agents.schema_source import MissAction, SchemaSource
from agents.segment_gaps import Finding, gap_record, gap_topic, set_first_event
from agents.segment_ledger import EventMark, SegmentLedger
from agents.stop_signal import wait_or_stop
from cassandra_model.digest import update_digest
from cassandra_model.errors import ModelError
from cassandra_model.partition_update import PartitionUpdate
from cassandra_model.table_schema import TableSchema
from runtime.config import AgentConfig, CdcConfig, ConfigError
from runtime.core_choice import choose_core, core_description
from schemas.raw_event import encode_raw_event, encode_raw_key, raw_event_record, raw_event_write_time

log = logging.getLogger(__name__)

#: published events between two yields to the event loop while a backlog is read
YIELD_EVERY = 200


@dataclass(slots=True)
class SegmentProgress:
    """What the agent knows about one segment in cdc_raw."""

    segment_id: int
    acks: AckTracker
    read_position: int
    created_at: float
    durable: int = 0
    reading_done: bool = False
    sent: int = 0
    quarantined: bool = False
    index_error_logged: bool = False
    seen_problems: set[tuple[int | None, str]] = field(default_factory=set)
    first_event: EventMark | None = None
    last_sent: tuple[int, dict[str, Any] | int] | None = None
    """Entry end and record of the last event sent (its write time is worked out only when needed), or
    its write time when the native core worked it out."""
    last_event: EventMark | None = None

    def last_event_mark(self) -> EventMark | None:
        """The last event read, with its write time (computed once per new last event)."""
        if self.last_sent is not None and (
            self.last_event is None or self.last_event.position != self.last_sent[0]
        ):
            position, record = self.last_sent
            written = record if isinstance(record, int) else raw_event_write_time(record)
            self.last_event = EventMark(self.segment_id, position, written)
        return self.last_event


class NodeAgent:
    def __init__(self, config: CdcConfig) -> None:
        if config.agent is None:
            raise ConfigError(
                f"config {config.source} has no `agent:` section (cdc_raw_directory, state_directory)"
            )
        self.config = config
        self.settings: AgentConfig = config.agent
        self.metrics = AgentMetrics()
        self.schema = SchemaSource(config.cassandra, cluster_name=config.cluster, metrics=self.metrics)
        self.publisher = RawPublisher(
            config.kafka, max_in_flight_bytes=self.settings.max_in_flight_bytes, metrics=self.metrics
        )
        self.core = choose_core(
            self.settings.core, installed=AVAILABLE == "native", key="agent.core", source=config.source
        )
        self.metrics.native_core.set(1 if self.core == "native" else 0)
        self.native_catalog = (
            NativeCatalog(self.schema.catalog, self._table_mode) if self.core == "native" else None
        )
        self.offsets = OffsetStore(self.settings.state_directory / "offsets.json")
        self.ledger = SegmentLedger.load(
            self.settings.state_directory / "cdc_raw_ledger.json", offsets=self.offsets.segments()
        )
        self.gaps = GapDetector(self.ledger)
        self._gaps_sending: set[str] = set()
        self.quarantine = Quarantine(
            self.settings.quarantine_directory or self.settings.state_directory / "quarantine"
        )
        self.progress: dict[int, SegmentProgress] = {}
        self.stopping = asyncio.Event()
        self.started = False
        self.last_cycle = time.monotonic()
        self.metrics_port: int | None = None
        self._schema_dirty = False
        self._last_schema_refresh = time.monotonic()
        self._last_offset_flush = 0.0
        self._missing_dir_logged = False

    # -- lifecycle -------------------------------------------------------------------------------------

    def request_stop(self) -> None:
        self.stopping.set()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self.request_stop)
        server = HealthServer(
            self.settings.metrics_bind, self.settings.metrics_port, self.metrics, self.health,
            gaps=self.gap_records, acknowledge_gaps=self.acknowledge_gaps,
        )  # fmt: skip
        self.metrics_port = await server.start()
        log.info("agent for node %s: cdc_raw %s, metrics on http://%s:%d/metrics, %s", self.settings.node,
                 self.settings.cdc_raw_directory, self.settings.metrics_bind, self.metrics_port,
                 core_description(self.core, installed=AVAILABLE == "native", key="agent.core"))  # fmt: skip
        try:
            if not await self._load_schema() or not await self.publisher.start(self.stopping):
                return
            self.started = True
            await self._publish_schemas()
            while not self.stopping.is_set():
                await self.cycle()
                await wait_or_stop(self.stopping, self.settings.poll_interval_ms / 1000)
        finally:
            if self.publisher.connected:
                await self.publisher.drain(10.0)
            self._save_offsets(force=True)
            await self.publisher.stop()
            self.schema.close()
            await server.stop()
            log.info("agent stopped; offsets saved")

    async def _load_schema(self) -> bool:
        """The first schema, retrying while Cassandra does not answer; AccessError when it keeps refusing
        the agent for a reason the config must fix."""
        backoff = 0.5
        refusals = 0
        while not self.stopping.is_set():
            if await asyncio.to_thread(self.schema.reload):
                log.info("schema loaded: %d tables", len(self.schema.catalog))
                return True
            problem = self.schema.problem
            refusals = refusals + 1 if problem is not None else 0
            if problem is not None and refusals >= ACCESS_REFUSALS_BEFORE_EXIT:
                raise AccessError(f"Cassandra refuses the agent: {problem}")
            await wait_or_stop(self.stopping, backoff)
            backoff = min(backoff * 2, 10.0)
        return False

    # -- one pass over cdc_raw -------------------------------------------------------------------------

    async def cycle(self) -> None:
        folder = self.settings.cdc_raw_directory
        if not folder.is_dir():
            if not self._missing_dir_logged:
                log.warning(
                    "cdc_raw folder %s does not exist yet; waiting for Cassandra to create it", folder
                )
                self._missing_dir_logged = True
            self.last_cycle = time.monotonic()
            return
        self._missing_dir_logged = False
        segments = list_cdc_segments(folder)
        self._note_reading()
        finding = self.gaps.observe(segments, list_orphan_indexes(folder, segments), now=time.time())
        if finding is not None:
            await self._found(finding)
        present = {s.name.segment_id for s in segments}
        for gone in [sid for sid in self.progress if sid not in present]:
            del self.progress[gone]
        for gone in [sid for sid in self.offsets.segments() if sid not in present]:
            self.offsets.forget(gone)  # removed by Cassandra (held no CDC data) or released earlier
        for segment in segments:
            if self.stopping.is_set():
                break
            progress = self._progress(segment)
            if progress is None:
                continue
            if segment.index_error is not None and not progress.index_error_logged:
                log.error("%s: unreadable %s (%s); the segment waits until it is readable",
                          segment.path.name, segment.index_path.name, segment.index_error)  # fmt: skip
                progress.index_error_logged = True
            if segment.index is None:
                continue
            progress.durable = segment.index.offset
            if not progress.reading_done and (
                segment.index.completed or progress.read_position < segment.index.offset
            ):
                await self._read(segment, progress)
            self._release_if_done(segment, progress)
        self._save_offsets()
        await self._publish_gaps()
        self._update_gauges(folder)
        if (
            self._schema_dirty
            or time.monotonic() - self._last_schema_refresh > self.settings.schema_refresh_interval_s
        ):
            await self._refresh_schema()
        self.last_cycle = time.monotonic()

    def _progress(self, segment: CdcSegment) -> SegmentProgress | None:
        sid = segment.name.segment_id
        progress = self.progress.get(sid)
        if progress is None:
            try:
                created = segment.path.stat().st_ctime
            except FileNotFoundError:
                return None
            start = self.offsets.get(sid)
            progress = SegmentProgress(sid, AckTracker(start), start, created)
            self.progress[sid] = progress
        return progress

    def _table_mode(self, table: TableSchema) -> TableMode:
        return TableMode.PUBLISH if self.schema.captured(table) else TableMode.SKIP

    def _decoder(self, segment: CdcSegment, progress: SegmentProgress) -> SegmentDecoder:
        index = segment.index
        assert index is not None
        options: dict[str, Any] = {
            "start": progress.read_position,
            "limit": index.read_limit,
            "completed": index.completed,
            "on_schema_miss": self._schema_miss,
        }
        if self.native_catalog is None:
            return SegmentDecoder(segment.path, self.schema.catalog, **options)
        return NativeSegmentDecoder(segment.path, self.schema.catalog, self.native_catalog,
                                    cluster=self.config.cluster, node=self.settings.node, **options)  # fmt: skip

    async def _read(self, segment: CdcSegment, progress: SegmentProgress) -> None:
        index = segment.index
        assert index is not None
        try:
            decoder = self._decoder(segment, progress)
        except FileNotFoundError:
            return
        except (CommitLogError, ModelError) as exc:
            # the whole segment is unreadable (encrypted, unknown version, bad header): keep a copy
            self._quarantine(
                segment, progress, [Problem(segment.path.name, exc.offset, None, "segment", exc.reason)]
            )
            if index.completed:
                progress.reading_done = True
            return
        topic = self.config.kafka.raw_topic
        partitions = await self.publisher.partitions_for(topic) if self.native_catalog is not None else None
        descriptor = decoder.descriptor
        descriptor_version = descriptor.version if descriptor else 0
        with decoder:
            schema_entry = -1
            for item in decoder.batches(partitions=partitions):
                if isinstance(item, EventBatch):
                    await self._publish_batch(item, progress, topic)
                    continue
                for update in item:
                    if update.keyspace == "system_schema":
                        # The DDL is applied on the node before it is logged: reload now, so the entries after
                        # it (ALTER ... WITH cdc = true, ADD column, new table) decode with the new definition
                        # (unless a reload since it was logged already brought it: a backlog's DDL).
                        if update.position != schema_entry:
                            schema_entry = update.position or 0
                            if not self.schema.covers(update.newest_timestamp()):
                                await self._refresh_schema()
                        continue
                    await self._publish_update(update, progress, topic, descriptor_version)
        progress.read_position = max(progress.read_position, decoder.resume_position)
        progress.acks.read_until(progress.read_position)
        stats = decoder.stats
        if stats.unknown_tables:
            count = sum(stats.unknown_tables.values())
            self.metrics.mutations_skipped.labels("unknown_table").inc(count)
            log.warning("%s: %d mutations of tables unknown to the schema skipped (%s)", segment.path.name, count,
                        ", ".join(str(t) for t in stats.unknown_tables))  # fmt: skip
        if stats.schema_changes:
            self._schema_dirty = True
        problems = [Problem(d.segment, d.offset, d.position, str(d.scope), d.reason) for d in decoder.damage]
        problems += [
            Problem(segment.path.name, e.offset, None, "entry", e.reason) for e in stats.decode_errors
        ]
        self.metrics.damaged_regions.inc(len(decoder.damage))
        self.metrics.decode_errors.inc(len(stats.decode_errors))
        self._quarantine(segment, progress, problems)
        if decoder.finished:
            progress.reading_done = True

    async def _publish_update(
        self, update: PartitionUpdate, progress: SegmentProgress, topic: str, descriptor_version: int
    ) -> None:
        """One update decoded by the Python decoder: its raw event, built and sent on its own."""
        if not self.schema.captured(update.schema):
            self.metrics.mutations_skipped.labels("not_captured").inc()
            return
        record = raw_event_record(
            update,
            cluster=self.config.cluster,
            node=self.settings.node,
            segment_id=progress.segment_id,
            descriptor_version=descriptor_version,
            digest=update_digest(update),
            published_at_ms=int(time.time() * 1000),
        )
        end = update.position or 0
        progress.acks.sent(end)
        progress.sent += 1
        progress.last_sent = (end, record)
        if progress.first_event is None:
            progress.first_event = EventMark(progress.segment_id, end, raw_event_write_time(record))
        if progress.sent % YIELD_EVERY == 0:
            await asyncio.sleep(0)  # decoding a backlog must not starve /health and /metrics
        await self.publisher.send(
            topic,
            encode_raw_key(update.keyspace, update.table, update.partition_key),
            encode_raw_event(record),
            self._on_ack(progress, end),
        )

    async def _publish_batch(self, batch: EventBatch, progress: SegmentProgress, topic: str) -> None:
        """Raw events the native core built: sent as whole Kafka batches, acknowledged entry by entry."""
        if batch.skipped:
            self.metrics.mutations_skipped.labels("not_captured").inc(batch.skipped)
        if not batch.ends:
            return
        progress.acks.sent_many(batch.ends)
        progress.sent += len(batch.ends)
        assert batch.first_write_time is not None and batch.last_write_time is not None
        progress.last_sent = (batch.ends[-1], batch.last_write_time)
        if progress.first_event is None:
            progress.first_event = EventMark(progress.segment_id, batch.ends[0], batch.first_write_time)
        await self.publisher.send_batch(
            topic, batch.keys, batch.values, batch.partitions, batch.ends, self._on_acks(progress)
        )
        await asyncio.sleep(0)  # decoding a backlog must not starve /health and /metrics

    def _on_acks(self, progress: SegmentProgress) -> Callable[[list[int]], None]:
        def acked(ends: list[int]) -> None:
            progress.acks.acked_many(ends)
            self.metrics.acknowledged(len(ends))

        return acked

    def _on_ack(self, progress: SegmentProgress, end: int) -> Callable[[], None]:
        def acked() -> None:
            progress.acks.acked(end)
            self.metrics.acknowledged()

        return acked

    def _schema_miss(self, error: MutationDecodeError) -> bool:
        action = self.schema.resolve_miss(error)
        if action is MissAction.WAIT:
            raise StopBeforeEntry  # decode it on a later cycle, never skip it for want of a schema
        if action is MissAction.RETRY:
            self._schema_dirty = True
        return action is MissAction.RETRY

    def _quarantine(self, segment: CdcSegment, progress: SegmentProgress, problems: list[Problem]) -> None:
        fresh = [p for p in problems if (p.offset, p.reason) not in progress.seen_problems]
        if not fresh:
            return
        progress.seen_problems.update((p.offset, p.reason) for p in fresh)
        if self.quarantine.record(segment.path, fresh) and not progress.quarantined:
            self.metrics.segments_quarantined.inc()
        progress.quarantined = True

    def _release_if_done(self, segment: CdcSegment, progress: SegmentProgress) -> None:
        """Delete or archive a COMPLETED segment once every event from it is acknowledged."""
        if (
            not progress.reading_done
            or progress.acks.in_flight
            or progress.acks.committed < progress.read_position
        ):
            return
        sid = progress.segment_id
        self.offsets.advance(sid, progress.acks.committed)
        self.offsets.flush()  # the offset reaches disk before the data leaves cdc_raw
        self._note_reading()
        self.gaps.released(sid)
        self.ledger.flush()  # and the ledger knows its going is no gap
        files = [segment.path, segment.index_path]
        try:
            if self.settings.processed_segments == "archive":
                archive = self.settings.archive_directory
                assert archive is not None  # validated with the config
                archive.mkdir(parents=True, exist_ok=True)
                for f in files:
                    shutil.move(str(f), archive / f.name)
            else:
                for f in files:
                    f.unlink(missing_ok=True)
        except OSError as exc:
            log.error("cannot release %s: %s (will retry)", segment.path.name, exc)
            return
        del self.progress[sid]
        self.offsets.forget(sid)
        self.offsets.flush()
        self.metrics.segments_released.inc()
        log.info("released %s (%s): %d events acknowledged up to position %d", segment.path.name,
                 self.settings.processed_segments, progress.sent, progress.acks.committed)  # fmt: skip

    # -- offsets, schema, gauges -----------------------------------------------------------------------

    def _save_offsets(self, *, force: bool = False) -> None:
        for sid, progress in self.progress.items():
            self.offsets.advance(sid, progress.acks.committed)
        self._note_reading()
        now = time.monotonic()
        if force or now - self._last_offset_flush >= self.settings.offset_flush_interval_ms / 1000:
            self.offsets.flush()
            self.ledger.flush()
            self._last_offset_flush = now

    # -- gaps: segments Cassandra deleted before they were read ----------------------------------------

    def _note_reading(self) -> None:
        """Tell the gap detector how far each segment was read and acknowledged."""
        for sid, p in self.progress.items():
            self.gaps.record_reading(sid, read_position=p.read_position, acknowledged_position=p.acks.committed,
                                     read_to_end=p.reading_done, first_event=p.first_event,
                                     last_event=p.last_event_mark())  # fmt: skip

    async def _found(self, finding: Finding) -> None:
        """Log, count and keep a gap (sent at the end of the cycle); ids that are only unaccounted for are
        no gap when the node blocks CDC writes instead of deleting segments."""
        if not finding.certain and await asyncio.to_thread(self.schema.cdc_block_writes):
            log.info("segment ids never seen in %s (%s) held no CDC data: node %s has cdc_block_writes: "
                     "true, so Cassandra deletes no unread segment", self.settings.cdc_raw_directory,
                     finding.describe(), self.settings.node)  # fmt: skip
            return
        tables = self.schema.captured_tables()
        record = gap_record(finding, cluster=self.config.cluster, node=self.settings.node,
                            cdc_raw=str(self.settings.cdc_raw_directory), tables=tables,
                            detected_at=time.time())  # fmt: skip
        self.gaps.record(record)
        self.ledger.flush()  # the gap survives a crash before it reaches Kafka
        self.metrics.lost_segments.inc(len(finding.lost))
        self.metrics.segment_gaps.inc()
        log.error("gap %s in %s of node %s: Cassandra deleted CDC data before the agent read it (%s); "
                  "%s. Recover with `%s`; acknowledge with POST /gaps/acknowledge",
                  record["gap_id"], self.settings.cdc_raw_directory, self.settings.node, finding.describe(),
                  "lost for certain" if finding.certain else "possibly lost (these ids held CDC data or none)",
                  record["recovery"])  # fmt: skip

    async def _publish_gaps(self) -> None:
        """Send the gaps Kafka does not have yet to the gap topic, keyed by node (again after a restart)."""
        topic = gap_topic(self.config.kafka.raw_topic)
        for gap in self.gaps.unpublished():
            if gap.gap_id in self._gaps_sending:
                continue
            first_after = gap.record["window"]["first_after"]
            if first_after is not None:
                set_first_event(gap.record, self.gaps.first_event(first_after["segment_id"]))
            self._gaps_sending.add(gap.gap_id)
            value = json.dumps(gap.record).encode()
            await self.publisher.send(topic, self.settings.node.encode(), value, self._on_gap_ack(gap.gap_id))

    def _on_gap_ack(self, gap_id: str) -> Callable[[], None]:
        def acked() -> None:
            self._gaps_sending.discard(gap_id)
            self.gaps.published(gap_id)
            log.info("gap %s published to %s", gap_id, gap_topic(self.config.kafka.raw_topic))

        return acked

    def gap_records(self) -> list[dict[str, Any]]:
        return [g.record for g in self.gaps.unacknowledged]

    def acknowledge_gaps(self) -> list[str]:
        ids = self.gaps.acknowledge()
        self.ledger.flush()
        self.metrics.unacknowledged_gaps.set(0)
        if ids:
            log.warning("gaps acknowledged: %s", ", ".join(ids))
        return ids

    async def _refresh_schema(self) -> None:
        self._schema_dirty = False
        self._last_schema_refresh = time.monotonic()
        if await asyncio.to_thread(self.schema.reload):
            await self._publish_schemas()

    async def _publish_schemas(self) -> None:
        for event in self.schema.pending_events():
            log.info("publishing schema of %s.%s (%s)%s", event.keyspace, event.table, event.table_id,
                     " as dropped" if event.dropped else "")  # fmt: skip
            await self.publisher.send(self.config.kafka.schema_topic, event.key, event.encode(), lambda: None)

    def _update_gauges(self, folder: Path) -> None:
        total = 0
        for entry in os.scandir(folder):
            with contextlib.suppress(OSError):
                if entry.name.endswith(".log"):
                    total += entry.stat().st_size
        self.metrics.update_pressure(total, self.settings.cdc_total_space)
        now = time.time()
        behind = [p for p in self.progress.values() if not p.reading_done or p.acks.committed < p.durable]
        lag = sum(max(0, p.durable - p.acks.committed) for p in self.progress.values())
        waiting = [p for p in behind if p.acks.committed < p.durable or (p.reading_done and p.acks.in_flight)]
        self.metrics.lag_bytes.set(lag)
        self.metrics.oldest_unprocessed_age.set(max((now - p.created_at for p in waiting), default=0.0))
        self.metrics.segments_pending.set(len(self.progress))
        self.metrics.unacknowledged_gaps.set(len(self.gaps.unacknowledged))
        self.metrics.update_rate()

    def health(self) -> dict[str, Any]:
        stalled_after = max(10.0, 20 * self.settings.poll_interval_ms / 1000)
        age = time.monotonic() - self.last_cycle
        behind = age >= stalled_after  # no pass over cdc_raw finished lately
        gaps = self.gaps.unacknowledged
        problems = []
        if gaps:
            problems.append(f"{len(gaps)} gaps in cdc_raw not acknowledged (GET /gaps)")
        if not self.publisher.connected:
            problems.append(
                f"Kafka at {self.config.kafka.bootstrap_servers} is not taking the agent's records"
            )
        if behind:
            problems.append(f"no pass over cdc_raw for {age:.0f} s")
        if not self.started:
            status = "starting"
        elif behind and self.publisher.connected:
            status = "stalled"  # not waiting for Kafka: something in the agent is stuck, a restart may help
        else:
            status = "degraded" if problems else "ok"  # it goes on; a restart brings back neither
        return {
            "status": status,
            "problems": problems,
            "node": self.settings.node,
            "gaps_unacknowledged": len(gaps),
            "last_gap": gaps[-1].gap_id if gaps else None,
            "kafka_connected": self.publisher.connected,
            "schema_tables": len(self.schema.catalog),
            "segments_pending": len(self.progress),
            "last_cycle_age_s": round(age, 3),
            "in_flight_bytes": self.publisher.in_flight_bytes,
            "core": self.core,
        }


def run_agent(config: CdcConfig) -> int:
    agent = NodeAgent(config)
    asyncio.run(agent.run())
    return 0
