"""The verdict of a run from its report's counts: every count must be zero for a clean run.

``clean`` (exit 0): all zero. ``failed`` (exit 1): any count above zero, or the pipeline not idle in time.
``invalid run`` (exit 2): a service a fault stopped did not come back, so nothing after it means anything;
its counts are null (never zero), so no summary reads it as a pass.
"""

from __future__ import annotations

from typing import Any

CLEAN = "clean"
FAILED = "failed"
INVALID = "invalid run"

#: report count -> what it means when above zero
FAILURES: dict[str, str] = {
    "lost": "rows Cassandra has that the clean topic or the workers' state lack",
    "phantom": "rows the clean topic or the workers' state have that Cassandra lacks",
    "wrong_values": "rows whose values differ from Cassandra's",
    "duplicate_or_spurious_events": "broken key histories (a lost, repeated or no-op event)",
    "unexplained_images": "events with a value or write time no client wrote",
    "keys_over_bound": "keys with more events than the statements that touched them can cause",
    "noop_events": "events whose before equals their after",
    "duplicate_events": "the same change emitted twice for a key",
    "swept_aside_unexplained": "dead letters, quarantined data, decode errors, skipped mutations or gaps "
    "no fault explains",
    "ttl_wrong": "live TTL cells whose write time or remaining TTL differs from Cassandra's",
}


def failures(report: dict[str, Any]) -> list[str]:
    """Each count of the report above zero, with what it means."""
    return [f"{name} = {report[name]}: {meaning}" for name, meaning in FAILURES.items() if report.get(name)]


def judged(report: dict[str, Any]) -> dict[str, Any]:
    """The report with ``ok``, ``verdict`` and ``failures`` set from its counts."""
    found = failures(report)
    return {**report, "ok": not found, "verdict": CLEAN if not found else FAILED, "failures": found}
