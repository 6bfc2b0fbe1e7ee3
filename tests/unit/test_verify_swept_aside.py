"""What the pipeline set aside, read and judged: dead letters, quarantine, agent counters and gap records,
against the faults that explain them (and only on their own node).

The inputs are the agents' own structures: `AgentMetrics` rendered as Prometheus text, a quarantine
report written by `Quarantine.record`, gap records built by `gap_record`.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from agents.metrics import AgentMetrics
from agents.quarantine import Problem, Quarantine
from agents.segment_gaps import Finding as GapFinding
from agents.segment_gaps import LostSegment, gap_record
from cdc.verify.agent_counters import AgentCounters, CounterTotals, parse_counters
from cdc.verify.swept_aside import (
    DEAD_LETTER,
    LOST_SEGMENT,
    NOT_CAPTURED,
    UNACCOUNTED_IDS,
    AgentSource,
    fault_node,
    swept_aside_report,
)

NODE_FAULT_ON_2 = {"kind": "node", "target": "node2", "at_operation": 10, "error": None}
AGENT_FAULT_ON_2 = {"kind": "agent", "target": "agent-node2", "at_operation": 20, "error": None}
WORKER_FAULT = {"kind": "worker", "target": "worker-1", "at_operation": 30, "error": None}


def sources(tmp_path: Path) -> list[AgentSource]:
    return [
        AgentSource(f"agent-node{i}", f"node{i}", tmp_path / f"agent-{i}" / "quarantine") for i in (1, 2, 3)
    ]


def gap(node: str, *, lost: bool) -> dict[str, Any]:
    finding = GapFinding(
        lost=[LostSegment(17, 7, "deleted_unread", 4096, False)] if lost else [],
        unaccounted=[] if lost else [(20, 25)],
    )
    return gap_record(finding, cluster="c", node=node, cdc_raw="/x", tables=["ks.kv"], detected_at=1.0)


def report(tmp_path: Path, **kwargs: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "dead_letters": [],
        "gaps": [],
        "sources": sources(tmp_path),
        "counters": {},
        "faults": [],
    }
    args.update(kwargs)
    return swept_aside_report(**args)


def test_a_clean_run_sets_nothing_aside_and_skipped_other_tables_are_only_reported(tmp_path: Path) -> None:
    metrics = AgentMetrics()
    metrics.mutations_skipped.labels("not_captured").inc(12)
    counters = {"agent-node1": parse_counters(metrics.render().decode())}
    out = report(tmp_path, counters=counters)
    assert out["unexplained"] == 0 and out["explained"] == 0 and out["findings"] == []
    assert out["skipped_not_captured"] == 12 and counters["agent-node1"][NOT_CAPTURED] == 12


def test_agent_counters_are_read_from_their_prometheus_text(tmp_path: Path) -> None:
    metrics = AgentMetrics()
    metrics.decode_errors.inc(2)
    metrics.damaged_regions.inc()
    metrics.mutations_skipped.labels("unknown_table").inc(3)
    metrics.lost_segments.inc()
    counters = {"agent-node3": parse_counters(metrics.render().decode())}
    out = report(tmp_path, counters=counters, faults=[NODE_FAULT_ON_2, AGENT_FAULT_ON_2])
    kinds = sorted((f["kind"], f["count"], f["node"]) for f in out["unexplained_examples"])
    assert kinds == [
        ("damaged_region", 1, "node3"),
        ("decode_error", 2, "node3"),
        ("lost_segment", 1, "node3"),
        ("skipped_unknown_table", 3, "node3"),
    ]


def test_a_quarantined_segment_is_found_on_disk_and_nothing_explains_it(tmp_path: Path) -> None:
    segment = tmp_path / "CommitLog-7-17.log"
    segment.write_bytes(b"\x00" * 64)
    quarantine = Quarantine(tmp_path / "agent-2" / "quarantine")
    quarantine.record(segment, [Problem(segment.name, 40, 40, "entry", "CRC mismatch")])
    out = report(tmp_path, faults=[NODE_FAULT_ON_2, AGENT_FAULT_ON_2, WORKER_FAULT])
    assert out["quarantined_segments"] == 1 and out["unexplained"] == 1
    [finding] = out["unexplained_examples"]
    assert finding["node"] == "node2" and "CRC mismatch" in finding["detail"]
    assert out["quarantine_problems"][0]["reason"] == "CRC mismatch"


def test_a_dead_letter_is_never_explained(tmp_path: Path) -> None:
    out = report(tmp_path, dead_letters=[(0, 4, 0, b"key", b"value")], faults=[WORKER_FAULT, NODE_FAULT_ON_2])
    assert out["dead_letters"] == 1 and out["unexplained"] == 1
    assert out["unexplained_examples"][0]["kind"] == DEAD_LETTER


def test_gaps_lost_segments_never_and_unaccounted_ids_only_by_a_fault_on_their_node(tmp_path: Path) -> None:
    lost, unaccounted = gap("node2", lost=True), gap("node2", lost=False)
    out = report(tmp_path, gaps=[lost, unaccounted], faults=[NODE_FAULT_ON_2])
    assert out["gap_records"] == 2 and out["unexplained"] == 1 and out["explained"] == 1
    assert out["unexplained_examples"][0]["kind"] == LOST_SEGMENT
    explained = [f for f in out["findings"] if f["explained_by"]]
    assert explained[0]["kind"] == UNACCOUNTED_IDS
    assert explained[0]["explained_by"] == ["node fault on node2 at operation 10"]

    assert report(tmp_path, gaps=[unaccounted], faults=[AGENT_FAULT_ON_2])["unexplained"] == 0
    on_other_node = {"kind": "node", "target": "node1", "at_operation": 10, "error": None}
    assert report(tmp_path, gaps=[unaccounted], faults=[on_other_node, WORKER_FAULT])["unexplained"] == 1
    failed_to_inject = {**NODE_FAULT_ON_2, "error": "RuntimeError()"}
    assert report(tmp_path, gaps=[unaccounted], faults=[failed_to_inject])["unexplained"] == 1


def test_fault_nodes() -> None:
    assert fault_node(AGENT_FAULT_ON_2) == fault_node(NODE_FAULT_ON_2) == "node2"
    assert fault_node(WORKER_FAULT) is None and fault_node({"kind": "broker", "target": "kafka"}) is None
    assert fault_node({"kind": "node_kill", "target": "node3"}) == "node3"
    assert fault_node({"kind": "worker_pause", "target": "worker-2"}) is None
    assert fault_node({"kind": "cdc_raw_full", "target": "node1"}) == "node1"
    assert fault_node({"kind": "commit_cut", "target": "workers"}) is None


def test_counters_add_up_over_a_process_restarts() -> None:
    totals = CounterTotals()
    totals.observe(1, {"a": 2.0})
    totals.observe(1, {"a": 5.0})
    totals.observe(2, {"a": 1.0})  # killed after counting 5; the new process counted 1 so far
    assert totals.totals() == {"a": 6.0}


def test_agent_counters_scrape_every_agent_and_keep_the_last_reading_of_one_that_is_down() -> None:
    agent = SimpleNamespace(name="agent-node1", starts=1)
    texts: list[str | None] = [
        "cdc_agent_decode_errors_total 1.0\n",
        None,
        'cdc_agent_decode_errors_total 2.0\ncdc_agent_mutations_skipped_total{reason="not_captured"} 4.0\n',
    ]
    counters = AgentCounters([agent], scrape=lambda _a: texts.pop(0))  # type: ignore[list-item]
    counters.poll()
    agent.starts = 2
    counters.poll()
    counters.poll()
    assert counters.totals() == {
        "agent-node1": {"cdc_agent_decode_errors_total": 3.0, NOT_CAPTURED: 4.0},
    }
