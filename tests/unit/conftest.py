"""Fixtures for tests that need no running service."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.shared_folder import require_shared


@pytest.fixture(scope="session")
def legacy_commitlog_dir() -> Path:
    """Real commit-log segments written by Cassandra 2.2-4.0, with the hash.txt each must decode to
    (skipped without the shared folder: see tests/shared_folder.py)."""
    return require_shared("fixtures", "legacy-commitlog")
