"""Where a pipeline job's wall time goes, in one line printed when it ends.

A small job is mostly fixed costs: the interpreter and its imports, the Kafka and Cassandra checks, the
JVM and Spark session, the stream's start; a user who waits a minute for 47 changes should see which one
it was without a profiler. The line also carries the time between the process's start and the job's
first step, read from /proc (Linux; left out elsewhere), which is what ``cdc`` and PySpark's imports cost.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path


def process_age_s() -> float | None:
    """Seconds since this process started (its start time in /proc, against the system's uptime)."""
    try:
        started_ticks = int(Path("/proc/self/stat").read_text().rsplit(") ", 1)[1].split()[19])
        uptime_s = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return uptime_s - started_ticks / os.sysconf("SC_CLK_TCK")


@dataclass(slots=True)
class JobPhases:
    """Named steps of one job and their wall seconds, in the order they first ran."""

    job: str
    before_s: float | None = field(default_factory=process_age_s)
    started: float = field(default_factory=time.monotonic)
    phases: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def timed(self, name: str) -> Iterator[None]:
        """Adds the block's wall time to phase ``name`` (also when it raises: a failed step took it too)."""
        began = time.monotonic()
        try:
            yield
        finally:
            self.add(name, time.monotonic() - began)

    def add(self, name: str, seconds: float) -> None:
        self.phases[name] = self.phases.get(name, 0.0) + seconds

    def line(self) -> str:
        """``<job>: 41.2 s: Python start-up and imports 3.1 s, Kafka metadata 0.4 s, ..., other 0.2 s``"""
        since = time.monotonic() - self.started
        parts = [] if self.before_s is None else [f"Python start-up and imports {self.before_s:.1f} s"]
        parts += [f"{name} {seconds:.1f} s" for name, seconds in self.phases.items()]
        parts.append(f"other {max(since - sum(self.phases.values()), 0.0):.1f} s")
        return f"{self.job}: {since + (self.before_s or 0.0):.1f} s: {', '.join(parts)}"
