"""Runs a snippet in a fresh Python, optionally one whose importer refuses `cdc_native`, as on a machine where
the native core was never built: how the agent's and the worker's core tests see a `pip install .`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

#: an importer that refuses `cdc_native`, put first (a snippet's head, or a sitecustomize.py)
HIDE_NATIVE_CORE = """
import sys

class _NoNative:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "cdc_native":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, _NoNative())
"""


def run_snippet(code: str, *, native_importable: bool) -> dict[str, object]:
    """The JSON object the snippet prints last, run from the repository's root."""
    code = ("" if native_importable else HIDE_NATIVE_CORE) + code
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]
