"""Unreadable commit-log data is copied aside with a JSON report, never skipped silently.

The first problem found in a segment copies the segment (and its `_cdc.idx`) into the quarantine folder;
every problem is appended to `<segment>.report.json` with the segment, file offset, logical position and
reason. The agent goes on with the next entry, section or segment.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

log = logging.getLogger(__name__)


@dataclass(slots=True, frozen=True)
class Problem:
    segment: str
    offset: int | None
    position: int | None
    scope: str
    reason: str


class Quarantine:
    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def report_path(self, segment: Path) -> Path:
        return self.folder / f"{segment.name}.report.json"

    def record(self, segment: Path, problems: list[Problem]) -> bool:
        """Log, copy and report; True when the segment was quarantined for the first time.

        The copy is refreshed whenever a new problem is added, so it holds the bytes the report speaks of
        even when the segment was still growing at the first problem.
        """
        if not problems:
            return False
        self.folder.mkdir(parents=True, exist_ok=True)
        report = self.report_path(segment)
        copied = not report.exists()
        entries = json.loads(report.read_text())["problems"] if not copied else []
        known = {(p["offset"], p["position"], p["reason"]) for p in entries}
        added = False
        for problem in problems:
            log.error("unreadable commit-log data in %s at offset %s (position %s): %s",
                      problem.segment, problem.offset, problem.position, problem.reason)  # fmt: skip
            if (problem.offset, problem.position, problem.reason) not in known:
                entries.append(asdict(problem))
                added = True
        if added:
            for source in (segment, segment.with_name(segment.name.replace(".log", "_cdc.idx"))):
                if source.exists():
                    shutil.copy2(source, self.folder / source.name)
        payload = {"segment": segment.name, "updated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                   "problems": entries}  # fmt: skip
        tmp = report.with_name(report.name + ".tmp")
        tmp.write_text(json.dumps(payload, indent=2))
        os.replace(tmp, report)
        return copied
