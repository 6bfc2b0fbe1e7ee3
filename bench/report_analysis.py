"""The hand-written analysis of a benchmark report, kept when a run remakes the report's tables.

Each report is the script's tables, then, from a heading of the script's own on, what someone wrote about
them; a run writes its tables and appends the analysis found in the earlier report.
"""

from __future__ import annotations

from pathlib import Path


def analysis_of(path: Path | None, heading: str) -> str:
    """The earlier report's text from its ``heading`` line on (with a blank line before it), or ""."""
    text = path.read_text() if path is not None and path.exists() else ""
    at = text.find(heading + "\n")
    return "\n" + text[at:] if at >= 0 else ""
