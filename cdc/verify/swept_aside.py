"""What the pipeline set aside instead of delivering: read, reported, and judged against the run's faults.

Sources:

- the workers' dead-letter topic ``<app_id>.dead-letter`` (raw events the worker could not merge);
- each agent's quarantine folder (``<state>/quarantine/*.report.json``: unreadable commit-log data) and its
  problem counters (cdc/verify/agent_counters.py): decode errors, damaged regions, quarantined segments,
  skipped mutations by reason, lost segments and gaps;
- the agents' gap topic ``<raw_topic>.gaps`` (segments Cassandra deleted before they were read).

A run with any of them is not clean unless one of its faults explains it. ``EXPLAINED_BY`` says which
fault kinds explain which finding, and only on the finding's own node:

- nothing explains a dead letter, a decode error, a damaged region, a quarantined segment, a mutation
  skipped for an unknown table (the run drops no table) or a lost segment (the local nodes run with
  ``cdc_block_writes: true``: a full cdc_raw makes Cassandra refuse writes, it deletes nothing unread). The
  agent reads only up to the durable offset Cassandra reports, behind CRCs, so no kill of a node, an agent
  or anything else makes a well-formed segment unreadable.
- segment ids the agent never saw with data, without lost segments (``certain: false``): Cassandra
  numbers its segments from its clock at start, so a node stopped and started leaves an id range no
  segment ever had; and segments without CDC data may come and go while an agent is down. The agent
  publishes such a gap only when it cannot tell that its node blocks writes instead (its node was down),
  so a node or agent fault on that node explains it, and so does a full cdc_raw (its agent was stopped).

Mutations skipped as ``not_captured`` (tables outside the run's keyspace or without CDC, in the same
segments) are reported and judged normal.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cdc.verify.oracle import read_topic_records
from runtime.config import KafkaConfig

DEAD_LETTER = "dead_letter"
QUARANTINED = "quarantined_problem"
DECODE_ERROR = "decode_error"
DAMAGED_REGION = "damaged_region"
SKIPPED_UNKNOWN_TABLE = "skipped_unknown_table"
LOST_SEGMENT = "lost_segment"
UNACCOUNTED_IDS = "unaccounted_segment_ids"

#: finding kind -> the fault kinds that explain it on the finding's node (empty: nothing explains it)
EXPLAINED_BY: dict[str, frozenset[str]] = {
    DEAD_LETTER: frozenset(),
    QUARANTINED: frozenset(),
    DECODE_ERROR: frozenset(),
    DAMAGED_REGION: frozenset(),
    SKIPPED_UNKNOWN_TABLE: frozenset(),
    LOST_SEGMENT: frozenset(),
    UNACCOUNTED_IDS: frozenset({"node", "node_kill", "agent", "cdc_raw_full"}),
}
#: agent counter series -> the finding it is
COUNTER_FINDINGS = {
    "cdc_agent_decode_errors_total": DECODE_ERROR,
    "cdc_agent_damaged_regions_total": DAMAGED_REGION,
    'cdc_agent_mutations_skipped_total{reason="unknown_table"}': SKIPPED_UNKNOWN_TABLE,
    "cdc_agent_lost_segments_total": LOST_SEGMENT,
}
NOT_CAPTURED = 'cdc_agent_mutations_skipped_total{reason="not_captured"}'


@dataclass(slots=True, frozen=True)
class AgentSource:
    """Where one agent keeps what it set aside."""

    name: str
    node: str
    quarantine: Path


@dataclass(slots=True)
class Finding:
    kind: str
    node: str | None
    count: int
    detail: str
    explained_by: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "node": self.node,
            "count": self.count,
            "detail": self.detail,
            "explained_by": self.explained_by,
        }


def fault_node(fault: dict[str, Any]) -> str | None:
    """The node a fault hit: an agent's node (``agent-node2``), a node; None for workers and the broker."""
    target = str(fault.get("target") or "")
    if fault.get("kind") == "agent":
        return target.removeprefix("agent-") or None
    if fault.get("kind") in ("node", "node_kill", "cdc_raw_full"):
        return target or None
    return None


def judge(findings: list[Finding], faults: list[dict[str, Any]]) -> list[Finding]:
    """Each finding with the faults of the run that explain it (EXPLAINED_BY, same node)."""
    for finding in findings:
        kinds = EXPLAINED_BY.get(finding.kind, frozenset())
        finding.explained_by = [
            f"{f['kind']} fault on {f['target']} at operation {f['at_operation']}"
            for f in faults
            if f.get("kind") in kinds and f.get("error") is None and fault_node(f) == finding.node
        ]
    return findings


def quarantine_findings(source: AgentSource) -> tuple[list[Finding], list[dict[str, Any]]]:
    """One finding per quarantined segment's report, and the reports' problems (for the report)."""
    findings: list[Finding] = []
    problems: list[dict[str, Any]] = []
    if not source.quarantine.is_dir():
        return findings, problems
    for path in sorted(source.quarantine.glob("*.report.json")):
        try:
            report = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            findings.append(Finding(QUARANTINED, source.node, 1, f"{path.name}: unreadable report ({exc})"))
            continue
        entries = report.get("problems", [])
        problems.extend({"agent": source.name, **p} for p in entries[:20])
        reasons = "; ".join(sorted({str(p.get("reason")) for p in entries}))[:300]
        findings.append(
            Finding(QUARANTINED, source.node, len(entries), f"{report.get('segment', path.name)}: {reasons}")
        )
    return findings, problems


def counter_findings(source: AgentSource, totals: dict[str, float]) -> list[Finding]:
    return [
        Finding(kind, source.node, int(totals[series]), f"{source.name}: {series} = {int(totals[series])}")
        for series, kind in COUNTER_FINDINGS.items()
        if totals.get(series, 0) > 0
    ]


def gap_findings(records: list[dict[str, Any]]) -> list[Finding]:
    out = []
    for record in records:
        node = record.get("node")
        lost = record.get("lost_segments") or []
        if lost:
            ids = ", ".join(str(s.get("segment_id")) for s in lost)
            out.append(Finding(LOST_SEGMENT, node, len(lost), f"gap {record.get('gap_id')}: segments {ids}"))
        elif record.get("unaccounted_segment_count"):
            out.append(
                Finding(
                    UNACCOUNTED_IDS,
                    node,
                    int(record["unaccounted_segment_count"]),
                    f"gap {record.get('gap_id')}: ids {record.get('unaccounted_segment_ids')}",
                )
            )
    return out


def dead_letter_findings(records: list[tuple[int, int, int, bytes, bytes | None]]) -> list[Finding]:
    return [
        Finding(
            DEAD_LETTER,
            None,
            1,
            f"dead letter {partition}@{offset}: key {(key or b'')[:60]!r}, {len(value or b'')} bytes",
        )
        for partition, offset, _ts, key, value in records
    ]


def read_records(kafka: KafkaConfig, topic: str) -> list[tuple[int, int, int, bytes, bytes | None]]:
    """Every committed record of ``topic`` (none when it does not exist)."""
    return asyncio.run(read_topic_records(kafka, topic))


def decode_gaps(records: list[tuple[int, int, int, bytes, bytes | None]]) -> list[dict[str, Any]]:
    out = []
    for partition, offset, _ts, _key, value in records:
        try:
            out.append(json.loads(value or b"null") or {})
        except ValueError:
            out.append({"gap_id": f"undecodable record {partition}@{offset}", "lost_segments": [{}]})
    return out


def swept_aside_report(
    *,
    dead_letters: list[tuple[int, int, int, bytes, bytes | None]],
    gaps: list[dict[str, Any]],
    sources: list[AgentSource],
    counters: dict[str, dict[str, float]],
    faults: list[dict[str, Any]],
    limit: int = 10,
) -> dict[str, Any]:
    """The report section: what was found where, and which of it no fault explains."""
    findings = dead_letter_findings(dead_letters) + gap_findings(gaps)
    problems: list[dict[str, Any]] = []
    for source in sources:
        found, listed = quarantine_findings(source)
        findings += found + counter_findings(source, counters.get(source.name, {}))
        problems += listed
    judge(findings, faults)
    unexplained = [f for f in findings if not f.explained_by]
    return {
        "dead_letters": len(dead_letters),
        "quarantined_segments": sum(1 for f in findings if f.kind == QUARANTINED),
        "quarantine_problems": problems[:limit],
        "gap_records": len(gaps),
        "gaps": gaps[:limit],
        "skipped_not_captured": int(sum(c.get(NOT_CAPTURED, 0) for c in counters.values())),
        "agent_counters": counters,
        "findings": [f.as_dict() for f in findings[:limit]],
        "explained": len(findings) - len(unexplained),
        "unexplained": len(unexplained),
        "unexplained_examples": [f.as_dict() for f in unexplained[:limit]],
    }
