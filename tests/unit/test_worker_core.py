"""Which core the worker runs, and that it says so: `pip install .` without the native core still gives a
working worker, on the Python core, and /health and /metrics tell which core runs.

Each check builds the worker in a fresh Python whose importer refuses `cdc_native` where the native core
must be absent, as on a machine where it was never built (nothing connects to Kafka: building the
worker does not)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.worker_core import AVAILABLE
from tests.unit.without_native import run_snippet

_BUILD_WORKER = """
import asyncio
import json
from pathlib import Path
from app.worker import Worker
from runtime.config import ConfigError, load_config


async def main():
    try:
        worker = Worker(load_config(Path({config!r})))
    except ConfigError as exc:
        return {{"error": str(exc)}}
    gauge = worker.stats.registry.get_sample_value("cdc_worker_native_core")
    heads = worker.loop._heads.__module__.partition(".")[0]  # which raw_event_heads the loop calls
    events = worker.loop._read_event.__qualname__  # and which decode_raw_event
    return {{"core": worker.core, "gauge": gauge, "heads": heads, "events": events}}

print(json.dumps(asyncio.run(main())))
"""


def _worker(tmp_path: Path, core: str, *, native_importable: bool) -> dict[str, object]:
    config = tmp_path / "worker.yaml"
    config.write_text(
        "kafka: {bootstrap_servers: '127.0.0.1:1'}\n"
        f"worker: {{data_directory: '{tmp_path / 'data'}', core: {core}, web_port: 1}}\n"
    )
    return run_snippet(_BUILD_WORKER.format(config=str(config)), native_importable=native_importable)


def test_without_the_native_core_the_worker_runs_on_the_python_core_and_says_so(tmp_path: Path) -> None:
    assert _worker(tmp_path, "auto", native_importable=False) == {
        "core": "python",
        "gauge": 0.0,
        "heads": "schemas",
        "events": "decode_raw_event",
    }


def test_asking_for_the_native_core_where_it_is_missing_is_a_config_error(tmp_path: Path) -> None:
    error = str(_worker(tmp_path, "native", native_importable=False)["error"])
    assert (
        "worker.core is native" in error and "make setup" in error and str(tmp_path / "worker.yaml") in error
    )


def test_the_python_core_can_be_chosen(tmp_path: Path) -> None:
    assert _worker(tmp_path, "python", native_importable=True) == {
        "core": "python",
        "gauge": 0.0,
        "heads": "schemas",
        "events": "decode_raw_event",
    }


def test_the_native_core_runs_when_installed(tmp_path: Path) -> None:
    if AVAILABLE != "native":
        pytest.skip("the native core is not installed (make setup builds it)")
    assert _worker(tmp_path, "auto", native_importable=True) == {
        "core": "native",
        "gauge": 1.0,
        "heads": "cdc_native",
        "events": "raw_event_reader.<locals>.decode",
    }
