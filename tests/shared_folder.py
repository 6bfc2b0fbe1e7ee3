"""The team's shared folder outside the repository (upstream commit-log fixtures): where it is, and a skip.

``CDC_SHARED_DIR`` if set, else ``../shared`` beside the repository root; ``.ci/run`` resolves it the same
way and refuses to run without it, so CI never skips the tests that need it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
ENV = "CDC_SHARED_DIR"


def shared_dir() -> Path:
    """The shared folder: ``$CDC_SHARED_DIR``, or ``../shared`` beside the repository root."""
    value = os.environ.get(ENV)
    return Path(value) if value else REPO_ROOT.parent / "shared"


def require_shared(*parts: str) -> Path:
    """``shared_dir() / parts``; skips the calling test, fixture or module when it is absent."""
    path = shared_dir().joinpath(*parts)
    if not path.exists():
        pytest.skip(
            f"shared fixtures not found at {path}: set {ENV} to the shared folder (default ../shared "
            "beside the repository)",
            allow_module_level=True,
        )
    return path
