"""`cdc verify --campaign N`: seeds, faults of every kind, a report per run, a summary; and the verdict."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cdc.verify.campaign import run_campaign, run_options, summarize_folders
from cdc.verify.faults import KINDS
from cdc.verify.runner import COUNTS, VerifyOptions, invalid_run
from cdc.verify.verdict import FAILURES, judged
from infra.settings import InfraSettings


def clean_counts() -> dict[str, Any]:
    counts: dict[str, Any] = dict.fromkeys(FAILURES, 0)
    counts.update(explained_images=40, dead_letters=0, ttl_compared=3)
    return counts


def test_a_report_with_every_count_zero_is_clean_and_any_count_fails_it() -> None:
    assert judged(clean_counts())["verdict"] == "clean"
    for name in FAILURES:
        report = judged({**clean_counts(), name: 1})
        assert report["verdict"] == "failed" and report["ok"] is False
        assert report["failures"][0].startswith(f"{name} = 1")


def test_an_invalid_run_has_a_null_for_every_count() -> None:
    report = invalid_run("kafka did not come back")
    assert all(report[name] is None for name in COUNTS)
    assert set(FAILURES) <= set(COUNTS)


def test_each_run_gets_its_seed_every_fault_kind_and_its_own_files(tmp_path: Path) -> None:
    base = VerifyOptions(workdir=tmp_path, seed=40, operations=300)
    third = run_options(base, 2, tmp_path / "reports")
    assert third.seed == 42 and third.faults == list(KINDS) and third.fault_count == len(KINDS)
    assert third.workdir == tmp_path / "run-003-seed-42"
    assert third.report_path == tmp_path / "reports" / "run-003-seed-42.json"
    only_nodes = run_options(VerifyOptions(workdir=tmp_path, faults=["node"], fault_count=3), 0, tmp_path)
    assert only_nodes.faults == ["node"] and only_nodes.fault_count == 3


def test_a_campaign_writes_a_report_per_run_and_sums_them_up(tmp_path: Path) -> None:
    outcomes = iter(["clean", "failed", "invalid", "raise"])

    def fake_run(_settings: InfraSettings, options: VerifyOptions, _say: Any) -> dict[str, Any]:
        outcome = next(outcomes)
        if outcome == "raise":
            raise RuntimeError("cluster gone")
        faults = [{"kind": k, "target": "x", "at_operation": 1, "error": None} for k in options.faults]
        if outcome == "invalid":
            report = {**invalid_run("node3 did not come back"), "seed": options.seed, "faults": faults}
        else:
            counts = clean_counts() | ({"lost": 2, "duplicate_events": 1} if outcome == "failed" else {})
            report = {**judged(counts), "seed": options.seed, "operations": 300, "faults": faults}
        assert options.report_path is not None
        options.report_path.parent.mkdir(parents=True, exist_ok=True)
        options.report_path.write_text(json.dumps(report))
        return report

    summary_path = tmp_path / "summary.json"
    summary = run_campaign(
        InfraSettings.from_env(home=tmp_path),
        VerifyOptions(workdir=tmp_path, seed=7, operations=300),
        4,
        summary_path=summary_path,
        say=lambda _m: None,
        run=fake_run,
    )
    assert json.loads(summary_path.read_text()) == json.loads(json.dumps(summary))
    assert summary["runs"] == 4 and summary["seeds"] == [7, 8, 9, 10]
    assert summary["verdicts"] == {"clean": 1, "error": 1, "failed": 1, "invalid run": 1}
    assert summary["clean"] is False and summary["judged_runs"] == 2
    assert summary["lost"] == 2 and summary["duplicate_events"] == 1 and summary["explained_images"] == 80
    assert summary["faults"] == dict.fromkeys(sorted(KINDS), 3)
    assert [r["verdict"] for r in summary["per_run"]] == ["clean", "failed", "invalid run", "error"]
    assert summary["per_run"][0]["report"] == "reports/run-001-seed-7.json", summary["per_run"][0]
    errored = json.loads((tmp_path / "reports" / "run-004-seed-10.json").read_text())
    assert errored["verdict"] == "error" and "cluster gone" in errored["reason"] and errored["lost"] is None
    assert len(list((tmp_path / "reports").glob("*.json"))) == 4


def test_a_campaign_of_clean_runs_is_clean(tmp_path: Path) -> None:
    def fake_run(_settings: InfraSettings, options: VerifyOptions, _say: Any) -> dict[str, Any]:
        return {**judged(clean_counts()), "seed": options.seed, "faults": []}

    summary = run_campaign(
        InfraSettings.from_env(home=tmp_path),
        VerifyOptions(workdir=tmp_path),
        2,
        summary_path=tmp_path / "s.json",
        say=lambda _m: None,
        run=fake_run,
    )
    assert summary["clean"] is True and summary["unexplained_images"] == 0
    with pytest.raises(ValueError, match="at least 1"):
        run_campaign(
            InfraSettings.from_env(home=tmp_path), VerifyOptions(workdir=tmp_path), 0, summary_path=tmp_path
        )


def test_campaigns_run_apart_sum_up_as_one_in_seed_order(tmp_path: Path) -> None:
    """Two halves of a campaign, each on services of its own, give one summary, runs in seed order and
    each report named under the halves' common folder."""
    for half, seeds in (("b", (12, 13)), ("a", (10, 11))):
        reports = tmp_path / half / "reports"
        reports.mkdir(parents=True)
        for seed in seeds:
            counts = dict.fromkeys(COUNTS, 0) | {"events_per_operation": 1.0, "latency_ms": {}}
            report = {
                **judged(counts),
                "seed": seed,
                "operations": 100,
                "faults": [{"kind": "node", "error": None}],
            }
            (reports / f"run-{seed - 9:03d}-seed-{seed}.json").write_text(json.dumps(report))
    summary = summarize_folders([tmp_path / "a", tmp_path / "b"])
    assert summary["seeds"] == [10, 11, 12, 13] and summary["runs"] == 4 and summary["clean"] is True
    assert summary["faults"] == {"node": 4} and summary["operations"] == 400
    assert [r["report"] for r in summary["per_run"]][::3] == [
        "a/reports/run-001-seed-10.json",
        "b/reports/run-004-seed-13.json",
    ]
    with pytest.raises(ValueError, match="no run"):
        summarize_folders([tmp_path / "missing"])
