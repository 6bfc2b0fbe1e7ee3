"""`cdc infra` as a user runs it: status shows the live services, a second `up` changes nothing."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from infra.cassandra import CassandraNode
from infra.process import port_is_free
from infra.settings import InfraSettings


def _cdc(settings: InfraSettings, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CDC_HOME": str(settings.home), "CDC_CACHE_DIR": str(settings.cache)}
    return subprocess.run(
        [sys.executable, "-m", "cdc", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )


def test_status_reports_running_services(
    infra_settings: InfraSettings, kafka_bootstrap: str, cassandra_node: CassandraNode
) -> None:
    done = _cdc(infra_settings, "infra", "status", "--json")
    assert done.returncode == 0, done.stderr
    rows = {row["service"]: row for row in json.loads(done.stdout)}
    assert rows["kafka"]["running"] and kafka_bootstrap in rows["kafka"]["endpoint"]
    node = rows["cassandra-node1"]
    assert node["running"]
    assert node["pid"] == cassandra_node.process.pid()
    assert node["data"] == str(cassandra_node.spec.root)
    assert os.path.isfile(node["log"]) and os.path.isfile(rows["kafka"]["log"])
    # Every log lives under the one logs folder.
    assert {os.path.dirname(r["log"]) for r in rows.values()} == {str(infra_settings.logs)}


def test_second_up_is_idempotent(
    infra_settings: InfraSettings, kafka_bootstrap: str, cassandra_node: CassandraNode
) -> None:
    pid_before = cassandra_node.process.pid()
    done = _cdc(infra_settings, "infra", "up")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("already running") == 2, done.stdout
    assert cassandra_node.process.pid() == pid_before


def test_demo_shows_change_events_rest_view_and_how_to_stop(
    infra_settings: InfraSettings, kafka_bootstrap: str, cassandra_node: CassandraNode
) -> None:
    done = _cdc(infra_settings, "demo", "--rows", "4", "--rounds", "3")
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "demo.readings WITH cdc = true" in out
    assert "round 3/3" in out
    # change events with before and after images, as a consumer of the clean topic sees them
    assert re.search(
        r"^  c  sensor-\d @ \S+ +value=[\d.]+ status=ok tags=\{celsius\} +\+\d+ ms$", out, re.M
    ), out
    assert re.search(
        r"^  u  sensor-\d @ \S+ +value: [\d.]+ -> [\d.]+, status: ok -> checked +\+\d+ ms$", out, re.M
    ), out
    assert re.search(r"^  u  sensor-\d @ \S+ +tags: \{celsius\} -> \{calibrated-\d, celsius\}", out, re.M), (
        out
    )
    assert re.search(r"^  d  sensor-\d @ \S+ +deleted, before: value=[\d.]+ status=\w+", out, re.M), out
    # the TTL row expires before the end (or, on a loaded machine, reaches the worker already expired)
    assert (
        "expired (TTL), before: value=99.9 status=transient" in out or "the TTL row gave no events" in out
    ), out
    assert "every write gave exactly its change event" in out, out
    # a row as the worker's REST endpoint serves it, with per-cell write times
    assert "REST GET http://127.0.0.1:6067/rows/demo/readings?key={" in out, out
    assert re.search(r"values: value=[\d.]+ status=checked tags=\{(calibrated-\d, )+celsius\}", out), out
    assert re.search(r"cells: +value writetime \d\d:\d\d:\d\d\.\d{3}", out), out
    # where logs and metrics are, and how to stop
    demo_home = infra_settings.home / "demo"
    assert f"log {demo_home / 'worker.log'}" in out and f"log {demo_home / 'agent-node1.log'}" in out
    assert "http://127.0.0.1:9465/metrics" in out and "http://127.0.0.1:6067/health" in out
    assert f"logs in {infra_settings.logs}" in out
    assert "Ctrl-C" in out and "`.venv/bin/cdc infra down` stops them" in out
    # agent and worker are stopped at the end, the services keep running
    assert "agent and worker stopped" in out
    assert port_is_free("127.0.0.1", 6067) and port_is_free("127.0.0.1", 9465)
    assert cassandra_node.is_running()
