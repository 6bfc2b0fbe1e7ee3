"""The agents' problem counters over a whole run, across their restarts.

An agent's Prometheus counters live in its process: a fault that kills it takes them along, so reading
`/metrics` once at the end would miss what it counted before. A thread scrapes every agent every few
seconds and adds up each incarnation's last reading (a new start of the process is a new incarnation). The
counts between an agent's last scrape and its kill are the only ones that can be missed; what they count
also lands somewhere durable, read separately (cdc/verify/swept_aside.py): quarantine reports on disk, gap
records on Kafka.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from runtime.service_process import ServiceProcess

#: the counters of problems an agent may have swept aside (prometheus_client adds ``_total``)
WATCHED = (
    "cdc_agent_decode_errors_total",
    "cdc_agent_damaged_regions_total",
    "cdc_agent_segments_quarantined_total",
    "cdc_agent_mutations_skipped_total",
    "cdc_agent_lost_segments_total",
    "cdc_agent_segment_gaps_total",
)


def parse_counters(text: str, names: tuple[str, ...] = WATCHED) -> dict[str, float]:
    """``series -> value`` of the ``names`` in a Prometheus text exposition; a series is the name with its
    labels as written (``cdc_agent_mutations_skipped_total{reason="not_captured"}``)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        series, _, value = line.rpartition(" ")
        if series.split("{", 1)[0] in names:
            try:
                out[series] = float(value)
            except ValueError:
                continue
    return out


@dataclass(slots=True)
class CounterTotals:
    """One process's counters summed over its incarnations."""

    _closed: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    _current: dict[str, float] = field(default_factory=dict)
    _incarnation: int | None = None

    def observe(self, incarnation: int, values: dict[str, float]) -> None:
        if self._incarnation is not None and incarnation != self._incarnation:
            for series, value in self._current.items():
                self._closed[series] += value
            self._current = {}
        self._incarnation = incarnation
        self._current.update(values)

    def totals(self) -> dict[str, float]:
        out = dict(self._closed)
        for series, value in self._current.items():
            out[series] = out.get(series, 0.0) + value
        return out


@dataclass(slots=True)
class AgentCounters:
    """Scrapes the agents' /metrics from a thread of its own until stopped (and once more then)."""

    agents: list[ServiceProcess]
    interval_s: float = 2.0
    scrape: Callable[[ServiceProcess], str | None] | None = None
    _totals: dict[str, CounterTotals] = field(default_factory=lambda: defaultdict(CounterTotals))
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="agent-counters", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.poll()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.poll()

    def poll(self) -> None:
        for agent in self.agents:
            text = (self.scrape or _metrics_text)(agent)
            if text is None:
                continue  # down (a fault) or busy: its last reading stands
            with self._lock:
                self._totals[agent.name].observe(agent.starts, parse_counters(text))

    def totals(self) -> dict[str, dict[str, float]]:
        """Agent name -> series -> total over the run."""
        with self._lock:
            return {name: totals.totals() for name, totals in sorted(self._totals.items())}


def _metrics_text(agent: ServiceProcess) -> str | None:
    got = agent.get("/metrics", 3.0)
    if got is None or got[0] != 200:
        return None
    return got[1].decode(errors="replace")
