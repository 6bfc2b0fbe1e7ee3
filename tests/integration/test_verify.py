"""`cdc verify` short runs: the correctness contract on the real three-node cluster, with one fault of each
classic kind (agent and worker kill -9, broker restart, a node stopped while writes go on), then with a
commit cut and a full cdc_raw, checked against
Cassandra's SELECT at ALL; every intermediate image explained by the clients' writes, no duplicate or no-op
event, nothing set aside, the whole worker state scanned, live TTLs compared, part of the writes at ONE."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cdc.verify.faults import CLASSIC_KINDS
from cdc.verify.runner import VerifyOptions, VerifyRun
from infra.cassandra import CassandraNode
from infra.settings import InfraSettings

pytestmark = pytest.mark.cluster


def test_short_run_with_every_fault_loses_invents_and_repeats_nothing(
    infra_settings: InfraSettings,
    cassandra_cluster: list[CassandraNode],
    kafka_bootstrap: str,
    tmp_path: Path,
) -> None:
    report_path = tmp_path / "report.json"
    options = VerifyOptions(
        workdir=tmp_path,
        seed=2,
        operations=2000,
        clients=4,
        workers=2,
        faults=list(CLASSIC_KINDS),
        idle_timeout_s=420,
        report_path=report_path,
    )
    report = VerifyRun(infra_settings, options, say=print).run()
    assert_clean(report)
    assert sorted(f["kind"] for f in report["faults"]) == sorted(CLASSIC_KINDS), report["faults"]
    assert all(f["error"] is None for f in report["faults"]), report["faults"]
    assert report["change_events"] > 0 and report["latency_ms"]["samples"] > 0, report["latency_ms"]
    assert json.loads(report_path.read_text())["seed"] == 2


def test_commit_cut_and_full_cdc_raw_lose_and_repeat_nothing(
    infra_settings: InfraSettings,
    cassandra_cluster: list[CassandraNode],
    kafka_bootstrap: str,
    tmp_path: Path,
) -> None:
    """The workers' connections cut right after a commit request (they reach Kafka through the proxy),
    then a node's agent stopped until Cassandra rejects CDC writes on that node, and started again."""
    options = VerifyOptions(
        workdir=tmp_path,
        seed=5,
        operations=800,
        clients=4,
        workers=2,
        faults=["commit_cut", "cdc_raw_full"],
        idle_timeout_s=420,
    )
    report = VerifyRun(infra_settings, options, say=print).run()
    assert_clean(report)
    faults = {f["kind"]: f for f in report["faults"]}
    assert sorted(faults) == ["cdc_raw_full", "commit_cut"], report["faults"]
    assert all(f["error"] is None for f in faults.values()), report["faults"]
    assert "cut after an EndTxn" in faults["commit_cut"]["detail"], faults
    assert "rejected CDC writes" in faults["cdc_raw_full"]["detail"], faults


def assert_clean(report: dict[str, Any]) -> None:
    """Every count of a judged run zero, with something checked (images, TTLs, writes at ONE)."""
    summary = json.dumps({k: v for k, v in report.items() if k != "tables"}, indent=1)
    tables = json.dumps(report.get("tables"), indent=1)[:4000]
    assert report["lost"] == 0 and report["phantom"] == 0 and report["wrong_values"] == 0, (
        f"{summary}\n{tables}"
    )
    assert report["duplicate_or_spurious_events"] == 0, f"{summary}\n{tables}"
    assert report["unexplained_images"] == 0 and report["explained_images"] > 0, f"{summary}\n{tables}"
    assert report["duplicate_events"] == report["noop_events"] == report["keys_over_bound"] == 0, summary
    assert report["dead_letters"] == 0 and report["swept_aside_unexplained"] == 0, report["swept_aside"]
    assert report["ttl_wrong"] == 0 and report["ttl_compared"] > 0, report["ttl"]
    assert report["writes_at_one"] > 0, summary
    assert report["ok"] is True and report["verdict"] == "clean", report.get("failures")
    assert not report["unexpected_exits"], report["unexpected_exits"]
