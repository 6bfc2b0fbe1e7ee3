"""Offsets survive restarts, never move backwards, and a damaged file is a clear error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agents.errors import OffsetStoreError
from agents.offset_store import OffsetStore


def test_offsets_survive_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "offsets.json"
    store = OffsetStore(path)
    store.advance(1700000000001, 4096)
    store.advance(1700000000002, 0)
    assert store.flush()
    assert not store.flush(), "nothing changed, nothing written"
    again = OffsetStore(path)
    assert again.get(1700000000001) == 4096
    assert again.segments() == {1700000000001: 4096, 1700000000002: 0}
    assert again.get(99) == 0
    assert not list(tmp_path.glob("*.tmp")), "the atomic write leaves no temporary file"


def test_offsets_never_move_backwards(tmp_path: Path) -> None:
    store = OffsetStore(tmp_path / "offsets.json")
    store.advance(5, 1000)
    with pytest.raises(OffsetStoreError, match="segment 5 would move backwards from 1000 to 999"):
        store.advance(5, 999)
    assert store.get(5) == 1000


def test_forget_removes_released_segments(tmp_path: Path) -> None:
    path = tmp_path / "offsets.json"
    store = OffsetStore(path)
    store.advance(5, 10)
    store.flush()
    store.forget(5)
    store.flush()
    assert json.loads(path.read_text())["segments"] == {}


@pytest.mark.parametrize("content", ["{not json", '{"format": 9, "segments": {}}', "[]"])
def test_damaged_file_is_a_clear_error(tmp_path: Path, content: str) -> None:
    path = tmp_path / "offsets.json"
    path.write_text(content)
    with pytest.raises(OffsetStoreError, match=r"offsets\.json"):
        OffsetStore(path)
