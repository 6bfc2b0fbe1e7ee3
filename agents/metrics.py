"""The agent's Prometheus metrics and the cdc_raw pressure warnings operators alert on."""

from __future__ import annotations

import logging
import time
from collections import deque

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

log = logging.getLogger(__name__)

PRESSURE_LEVELS = (0.5, 0.75, 0.9)


class AgentMetrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.events_published = Counter(
            "cdc_agent_events_published", "raw events acknowledged by Kafka", registry=r
        )
        self.send_errors = Counter(
            "cdc_agent_send_errors", "failed sends and connection attempts (resent)", registry=r
        )
        self.mutations_skipped = Counter(
            "cdc_agent_mutations_skipped",
            "partition updates not published, by reason",
            ["reason"],
            registry=r,
        )
        self.damaged_regions = Counter(
            "cdc_agent_damaged_regions",
            "corrupt entries or sections found (reported, quarantined)",
            registry=r,
        )
        self.decode_errors = Counter(
            "cdc_agent_decode_errors", "entries that passed CRC but did not decode", registry=r
        )
        self.segments_quarantined = Counter(
            "cdc_agent_segments_quarantined", "segments copied to quarantine", registry=r
        )
        self.segments_released = Counter(
            "cdc_agent_segments_released",
            "COMPLETED segments deleted or archived after full acknowledgement",
            registry=r,
        )
        self.lost_segments = Counter(
            "cdc_agent_lost_segments",
            "segments holding CDC data that Cassandra deleted from cdc_raw before the agent read them to "
            "their end (cdc_block_writes: false and cdc_raw full)",
            registry=r,
        )
        self.segment_gaps = Counter(
            "cdc_agent_segment_gaps",
            "gaps found in cdc_raw (segments lost or unaccounted for), each published to <raw_topic>.gaps",
            registry=r,
        )
        self.unacknowledged_gaps = Gauge(
            "cdc_agent_unacknowledged_gaps",
            "gaps not yet acknowledged (POST /gaps/acknowledge); /health says degraded while above 0",
            registry=r,
        )
        self.schema_reloads = Counter("cdc_agent_schema_reloads", "schema reloads from Cassandra", registry=r)
        self.cdc_raw_bytes = Gauge("cdc_agent_cdc_raw_bytes", "bytes of segments in cdc_raw", registry=r)
        self.cdc_total_space_bytes = Gauge(
            "cdc_agent_cdc_total_space_bytes", "the node's cdc_total_space", registry=r
        )
        self.cdc_raw_usage_ratio = Gauge(
            "cdc_agent_cdc_raw_usage_ratio", "cdc_raw bytes / cdc_total_space", registry=r
        )
        self.oldest_unprocessed_age = Gauge(
            "cdc_agent_oldest_unprocessed_segment_age_seconds",
            "age of the oldest segment with data not yet acknowledged (0 when caught up)",
            registry=r,
        )
        self.lag_bytes = Gauge(
            "cdc_agent_lag_bytes", "durable bytes in cdc_raw not yet acknowledged", registry=r
        )
        self.in_flight_bytes = Gauge(
            "cdc_agent_in_flight_bytes", "bytes sent and not yet acknowledged", registry=r
        )
        self.events_per_second = Gauge(
            "cdc_agent_events_per_second", "acknowledged events/s over 10 s", registry=r
        )
        self.segments_pending = Gauge(
            "cdc_agent_segments_pending", "segments in cdc_raw not yet released", registry=r
        )
        self.native_core = Gauge(
            "cdc_agent_native_core",
            "1 when the native (Rust) core decodes and encodes events, 0 on the Python core",
            registry=r,
        )
        self._acked_total = 0
        self._acks: deque[tuple[float, int]] = deque()
        self._pressure_level = 0.0

    def acknowledged(self, count: int = 1) -> None:
        self.events_published.inc(count)
        self._acked_total += count

    def update_rate(self) -> float:
        """Events/s over the last 10 s, from the acknowledged-events counter."""
        now = time.monotonic()
        total = self._acked_total
        self._acks.append((now, total))
        while len(self._acks) > 2 and now - self._acks[0][0] > 10:
            self._acks.popleft()
        first_t, first_n = self._acks[0]
        rate = (total - first_n) / (now - first_t) if now > first_t else 0.0
        self.events_per_second.set(rate)
        return rate

    def update_pressure(self, cdc_raw_bytes: int, total_space: int) -> None:
        """Gauges, and a log line each time usage crosses 50, 75 or 90 % (up: WARNING/ERROR, down: INFO)."""
        ratio = cdc_raw_bytes / total_space if total_space else 0.0
        self.cdc_raw_bytes.set(cdc_raw_bytes)
        self.cdc_total_space_bytes.set(total_space)
        self.cdc_raw_usage_ratio.set(ratio)
        level = max((lv for lv in PRESSURE_LEVELS if ratio >= lv), default=0.0)
        if level > self._pressure_level:
            log.log(
                logging.ERROR if level >= PRESSURE_LEVELS[-1] else logging.WARNING,
                "cdc_raw is %.0f%% full (%d of %d bytes): at 100%% Cassandra rejects writes to CDC tables "
                "(cdc_block_writes: true) or deletes the oldest segments, read or not (false)",
                ratio * 100, cdc_raw_bytes, total_space,
            )  # fmt: skip
        elif level < self._pressure_level:
            log.info("cdc_raw usage back under %.0f%% (%.0f%%)", self._pressure_level * 100, ratio * 100)
        self._pressure_level = level

    def render(self) -> bytes:
        return generate_latest(self.registry)
