"""Which core the agent runs, and that it says so: `pip install .` without the native core still gives a
working agent, on the Python core, and /health and /metrics tell which core runs.

Each check builds the agent in a fresh Python whose importer refuses `cdc_native` where the native core
must be absent, as on a machine where it was never built."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.without_native import run_snippet

_BUILD_AGENT = """
import json
from pathlib import Path
from agents.node_agent import NodeAgent
from runtime.config import ConfigError, load_config

try:
    agent = NodeAgent(load_config(Path({config!r})))
except ConfigError as exc:
    print(json.dumps({{"error": str(exc)}}))
else:
    gauge = agent.metrics.registry.get_sample_value("cdc_agent_native_core")
    print(json.dumps({{"core": agent.core, "health": agent.health()["core"], "gauge": gauge}}))
"""


def _agent(tmp_path: Path, core: str, *, native_importable: bool) -> dict[str, object]:
    config = tmp_path / "agent.yaml"
    config.write_text(
        "kafka: {bootstrap_servers: '127.0.0.1:1'}\n"
        f"agent: {{cdc_raw_directory: '{tmp_path / 'cdc_raw'}', state_directory: '{tmp_path / 'state'}', "
        f"core: {core}}}\n"
    )
    return run_snippet(_BUILD_AGENT.format(config=str(config)), native_importable=native_importable)


def test_without_the_native_core_the_agent_runs_on_the_python_core_and_says_so(tmp_path: Path) -> None:
    assert _agent(tmp_path, "auto", native_importable=False) == {
        "core": "python",
        "health": "python",
        "gauge": 0.0,
    }


def test_asking_for_the_native_core_where_it_is_missing_is_a_config_error(tmp_path: Path) -> None:
    error = str(_agent(tmp_path, "native", native_importable=False)["error"])
    assert "agent.core is native" in error and "make setup" in error and str(tmp_path / "agent.yaml") in error


def test_the_python_core_can_be_chosen(tmp_path: Path) -> None:
    assert _agent(tmp_path, "python", native_importable=True) == {
        "core": "python",
        "health": "python",
        "gauge": 0.0,
    }


def test_the_native_core_runs_when_installed(tmp_path: Path) -> None:
    from agents.commitlog.native_core import cdc_native

    if cdc_native is None:
        pytest.skip("the native core is not installed (make setup builds it)")
    assert _agent(tmp_path, "auto", native_importable=True) == {
        "core": "native",
        "health": "native",
        "gauge": 1.0,
    }
