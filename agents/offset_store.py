"""How far the agent got in each cdc_raw segment, saved durably.

A segment's offset is the logical position up to which every event was acknowledged by Kafka: a restart
resumes there, so nothing acknowledged is lost and at most the unacknowledged tail is sent again. The file
is replaced atomically (write, fsync, rename, fsync the folder), and offsets never move backwards.
"""

from __future__ import annotations

import json
from pathlib import Path

from agents.durable_file import write_durably
from agents.errors import OffsetStoreError

_FORMAT = 1


class OffsetStore:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._offsets: dict[int, int] = {}
        self._dirty = False
        self._load()

    def _load(self) -> None:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            raise OffsetStoreError(
                f"offsets file {self.path} is unreadable ({exc}); move it away to restart from the segments' "
                "beginning (events already sent would be sent again)"
            ) from exc
        if (
            not isinstance(data, dict)
            or data.get("format") != _FORMAT
            or not isinstance(data.get("segments"), dict)
        ):
            raise OffsetStoreError(f"offsets file {self.path} is not in format {_FORMAT}")
        self._offsets = {int(k): int(v) for k, v in data["segments"].items()}

    def get(self, segment_id: int) -> int:
        """Where reading of the segment resumes (0 for a segment never seen)."""
        return self._offsets.get(segment_id, 0)

    def segments(self) -> dict[int, int]:
        return dict(self._offsets)

    def advance(self, segment_id: int, position: int) -> None:
        current = self._offsets.get(segment_id, 0)
        if position < current:
            raise OffsetStoreError(
                f"offset of segment {segment_id} would move backwards from {current} to {position}"
            )
        if position != current or segment_id not in self._offsets:
            self._offsets[segment_id] = position
            self._dirty = True

    def forget(self, segment_id: int) -> None:
        """The segment is gone from cdc_raw (processed and deleted, or removed by Cassandra)."""
        if self._offsets.pop(segment_id, None) is not None:
            self._dirty = True

    def flush(self) -> bool:
        """Write the offsets if they changed; True if a write happened."""
        if not self._dirty:
            return False
        payload = json.dumps(
            {"format": _FORMAT, "segments": {str(k): v for k, v in sorted(self._offsets.items())}}
        )
        write_durably(self.path, payload)
        self._dirty = False
        return True
