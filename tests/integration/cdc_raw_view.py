"""Test probes over a node's cdc_raw: which written values are already durable there."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path

from agents.cdc_raw import list_cdc_segments


def markers_found(cdc_raw: Path, markers: Iterable[bytes]) -> set[bytes]:
    """Which marker values appear below the durable offset of any segment in cdc_raw."""
    wanted = set(markers)
    seen: set[bytes] = set()
    for segment in list_cdc_segments(cdc_raw):
        data = segment.durable_bytes()
        seen.update(m for m in wanted if m in data)
    return seen


def wait_for(condition: Callable[[], bool], timeout_s: float, what: str) -> float:
    """Poll until `condition` holds; fail the test naming `what` otherwise. Returns the seconds waited."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout_s:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.05)
    return time.monotonic() - started
