"""Everything Spark shows about an application, gathered to be searched for secrets: the driver's web UI as
its REST API serves it while the application runs, the event log, the driver's output and the logs of a
standalone cluster's daemons and executors.

Each piece is kept with where it came from, so a secret found names the endpoint, file or stream, and the
secrets are looked for as they are and as JSON escapes them (the JAAS line holds quotes).
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

#: the REST API's views of one application that can hold a setting, an option or a plan
APPLICATION_ENDPOINTS = (
    "environment",
    "jobs",
    "stages?details=true",
    "allexecutors",
    "storage/rdd",
    "sql?details=true&planDescription=true",
)


@dataclass(slots=True)
class Traces:
    """(where, text) pairs: what Spark showed, and where it showed it."""

    pieces: list[tuple[str, str]] = field(default_factory=list, repr=False)

    def add(self, where: str, text: str) -> None:
        self.pieces.append((where, text))

    def add_files(self, files: Iterable[Path]) -> int:
        count = 0
        for path in files:
            if path.is_file():
                self.add(str(path), path.read_text(errors="replace"))
                count += 1
        return count

    def containing(self, needle: str) -> list[str]:
        """Where ``needle`` shows: each place once."""
        return sorted({where for where, text in self.pieces if needle in text})

    def leaks(self, secrets: dict[str, str]) -> dict[str, list[str]]:
        """For each named secret found anywhere (as it is or JSON-escaped), where it shows."""
        found = {}
        for name, value in secrets.items():
            forms = {value, json.dumps(value)[1:-1]}
            places = sorted({where for form in forms for where in self.containing(form)})
            if places:
                found[name] = places
        return found


def _get(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return str(response.read().decode(errors="replace"))
    except (urllib.error.URLError, OSError, ValueError):
        return None


@contextmanager
def recording_ui(port: int, traces: Traces, interval_s: float = 0.5) -> Iterator[set[str]]:
    """Poll the REST API of the driver UI on ``port`` while the block runs (the application comes and goes
    within it) and add every answer to ``traces``; yields the application ids it saw."""
    seen: set[str] = set()
    stop = threading.Event()
    base = f"http://127.0.0.1:{port}/api/v1"

    def poll() -> None:
        while not stop.is_set():
            listing = _get(f"{base}/applications")
            if listing is not None:
                traces.add(f"{base}/applications", listing)
                try:
                    ids = [app["id"] for app in json.loads(listing)]
                except (ValueError, KeyError, TypeError):
                    ids = []
                for app in ids:
                    seen.add(app)
                    for endpoint in APPLICATION_ENDPOINTS:
                        url = f"{base}/applications/{app}/{endpoint}"
                        body = _get(url)
                        if body is not None:
                            traces.add(url, body)
            stop.wait(interval_s)

    thread = threading.Thread(target=poll, name="spark-ui-recorder", daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        stop.set()
        thread.join(30)
