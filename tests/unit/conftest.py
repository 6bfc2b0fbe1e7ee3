"""Fixtures for tests that need no running service."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """The team's shared folder (docs and data fixtures), a sibling of the repository by default."""
    path = Path(os.environ.get("CDC_SHARED_DIR", REPO_ROOT.parent / "shared"))
    if not (path / "fixtures").is_dir():
        pytest.fail(f"shared fixtures not found at {path}; set CDC_SHARED_DIR to the shared folder")
    return path


@pytest.fixture(scope="session")
def legacy_commitlog_dir(shared_dir: Path) -> Path:
    """Real commit-log segments written by Cassandra 2.2-4.0, with the hash.txt each must decode to."""
    return shared_dir / "fixtures" / "legacy-commitlog"
