"""`cdc verify --campaign N`: N short runs one after another, each with its own seed and faults of every
kind, one JSON report per run and a summary of them all.

One run shows the contract held for one seed and one order of faults; a campaign shows it for many, and
its summary is what a change to the pipeline is judged by: every count zero, every verdict clean. Run i
uses seed ``seed + i``. A run that raises is recorded with the verdict ``error`` and null counts, and the
campaign goes on. The summary is written again after each run, so a long campaign can be watched.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cdc.verify.faults import KINDS
from cdc.verify.runner import COUNTS, VerifyOptions, VerifyRun, invalid_run
from cdc.verify.verdict import CLEAN
from infra.settings import InfraSettings

ERROR = "error"
#: the counts a summary adds up over the runs that were judged
SUMMED = tuple(name for name in COUNTS if name not in ("events_per_operation", "latency_ms"))


def run_options(options: VerifyOptions, number: int, reports: Path) -> VerifyOptions:
    """The options of run ``number`` (0-based) of a campaign."""
    seed = options.seed + number
    name = f"run-{number + 1:03d}-seed-{seed}"
    faults = options.faults or list(KINDS)
    return dataclasses.replace(
        options,
        seed=seed,
        faults=faults,
        fault_count=options.fault_count if options.fault_count is not None else len(faults),
        workdir=options.workdir / name,
        report_path=reports / f"{name}.json",
    )


def summarize(reports: list[dict[str, Any]], report_paths: list[Path]) -> dict[str, Any]:
    """The campaign's summary: totals over the judged runs (null when none was), verdicts, and a line per
    run (``report``: its path under the campaign's workdir). ``clean`` only when every run is."""
    judged = [
        r for r in reports if r.get("verdict") not in (ERROR, "invalid run") and r.get("lost") is not None
    ]
    verdicts = Counter(str(r.get("verdict")) for r in reports)
    fired = Counter(f["kind"] for r in reports for f in r.get("faults", []) if f.get("error") is None)
    failed_to_fire = Counter(
        f["kind"] for r in reports for f in r.get("faults", []) if f.get("error") is not None
    )
    totals = {name: (sum(r.get(name) or 0 for r in judged) if judged else None) for name in SUMMED}
    return {
        "runs": len(reports),
        "seeds": [r.get("seed") for r in reports],
        "operations": sum(int(r.get("operations") or 0) for r in reports),
        "faults": dict(sorted(fired.items())),
        "faults_not_injected": dict(sorted(failed_to_fire.items())),
        "verdicts": dict(sorted(verdicts.items())),
        "clean": bool(reports) and verdicts[CLEAN] == len(reports),
        "judged_runs": len(judged),
        **totals,
        "per_run": [
            {
                "seed": r.get("seed"),
                "verdict": r.get("verdict"),
                "reason": r.get("reason"),
                "failures": r.get("failures", []),
                "operations": r.get("operations"),
                "writes_at_one": r.get("writes_at_one"),
                "faults": [f["kind"] for f in r.get("faults", [])],
                **{name: r.get(name) for name in SUMMED},
                "total_s": r.get("total_s"),
                "report": str(path),
            }
            for r, path in zip(reports, report_paths, strict=True)
        ],
    }


def summarize_folders(folders: list[Path]) -> dict[str, Any]:
    """One summary of the run reports in ``folders`` (each a campaign's workdir, whose ``reports/`` holds
    them), in seed order: a campaign split over several sets of services adds up as one. Each run's
    ``report`` path is relative to the folders' common parent."""
    paths = sorted(
        (path for folder in folders for path in (folder / "reports").glob("run-*.json")),
        key=lambda path: (json.loads(path.read_text()).get("seed") or 0, path.name),
    )
    if not paths:
        raise ValueError(f"no run-*.json reports under {', '.join(str(f / 'reports') for f in folders)}")
    parent = Path(os.path.commonpath([str(folder.resolve().parent) for folder in folders]))
    reports = [json.loads(path.read_text()) for path in paths]
    return summarize(reports, [path.resolve().relative_to(parent) for path in paths])


def run_campaign(
    settings: InfraSettings,
    options: VerifyOptions,
    runs: int,
    *,
    summary_path: Path,
    say: Callable[[str], None] = print,
    run: Callable[[InfraSettings, VerifyOptions, Callable[[str], None]], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """``runs`` runs from ``options`` (its seed is the first); reports under ``options.workdir/reports``."""
    if runs < 1:
        raise ValueError(f"--campaign {runs}: give at least 1 run")
    execute = run or (lambda s, o, out: VerifyRun(s, o, say=out).run())
    reports_dir = options.workdir / "reports"
    reports: list[dict[str, Any]] = []
    paths: list[Path] = []
    summary: dict[str, Any] = {}
    began = time.monotonic()
    for number in range(runs):
        one = run_options(options, number, reports_dir)
        assert one.report_path is not None
        say(
            f"campaign run {number + 1} of {runs}: seed {one.seed}, {one.operations} operations, faults {one.faults}"
        )
        try:
            report = execute(settings, one, say)
        except Exception as exc:  # a run that raises is recorded, not the end of the campaign
            report = {**invalid_run(f"the run raised {exc!r}"), "verdict": ERROR, "seed": one.seed}
            one.report_path.parent.mkdir(parents=True, exist_ok=True)
            one.report_path.write_text(json.dumps(report, indent=2, default=str))
        reports.append(report)
        paths.append(one.report_path.relative_to(options.workdir))  # the summary names no machine's folders
        summary = {**summarize(reports, paths), "total_s": round(time.monotonic() - began, 1)}
        summary_path.parent.mkdir(parents=True, exist_ok=True)
        summary_path.write_text(json.dumps(summary, indent=2, default=str))
        say(f"campaign run {number + 1} of {runs}: {report.get('verdict')}")
    return summary
