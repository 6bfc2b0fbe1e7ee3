"""`cdc infra` as a user runs it: status shows the live services, a second `up` changes nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from infra.cassandra import CassandraNode
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


def test_demo_shows_durable_offset_growing_and_raw_events(
    infra_settings: InfraSettings, kafka_bootstrap: str, cassandra_node
) -> None:
    done = _cdc(infra_settings, "demo", "--rows", "50", "--rounds", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "demo.readings WITH cdc = true" in done.stdout
    for round_no in (1, 2):
        section = done.stdout.split(f"round {round_no}:")[1].split("round")[0]
        assert "bytes durable" in section, f"round {round_no} shows no growing segment:\n{done.stdout}"
        assert "raw events on demo.raw: 50/50" in section, done.stdout
    assert "node agent stopped" in done.stdout
