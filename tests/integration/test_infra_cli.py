"""`cdc infra` as a user runs it: status shows the live services, a second `up` changes nothing."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from infra.cassandra import CassandraNode
from infra.process import port_is_free
from infra.settings import InfraSettings
from runtime.service_process import free_port


def _cdc(settings: InfraSettings, *args: str, **extra_env: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CDC_HOME": str(settings.home), "CDC_CACHE_DIR": str(settings.cache), **extra_env}
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
    assert node["cdc_raw"] == str(cassandra_node.spec.cdc_raw)
    table = _cdc(infra_settings, "infra", "status").stdout
    assert f"  node1  {cassandra_node.spec.cdc_raw}" in table, table
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
    # ports of its own, so it runs beside a developer's demo (9465, 6067): one by option, one by variable
    agent_port, worker_port = free_port(), free_port()
    done = _cdc(
        infra_settings,
        "demo",
        "--rows",
        "4",
        "--rounds",
        "3",
        "--agent-port",
        str(agent_port),
        CDC_DEMO_WORKER_PORT=str(worker_port),
    )
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
    assert f"REST GET http://127.0.0.1:{worker_port}/rows/demo/readings?key={{" in out, out
    assert re.search(r"values: value=[\d.]+ status=checked tags=\{(calibrated-\d, )+celsius\}", out), out
    assert re.search(r"cells: +value writetime \d\d:\d\d:\d\d\.\d{3}", out), out
    # where logs and metrics are, and how to stop
    demo_home = infra_settings.home / "demo"
    assert f"log {demo_home / 'worker.log'}" in out and f"log {demo_home / 'agent-node1.log'}" in out
    assert f"http://127.0.0.1:{agent_port}/metrics" in out and f"http://127.0.0.1:{worker_port}/health" in out
    assert f"logs in {infra_settings.logs}" in out
    assert "Ctrl-C" in out and "`.venv/bin/cdc infra down` stops them" in out
    # agent and worker are stopped at the end, the services keep running
    assert "agent and worker stopped" in out
    assert port_is_free("127.0.0.1", worker_port) and port_is_free("127.0.0.1", agent_port)
    assert cassandra_node.is_running()


def test_two_checkouts_fetching_one_artifact_at_once_share_one_download(tmp_path: Path) -> None:
    """Two processes that need the same artifact of an empty shared cache at the same moment: one fetches
    it, the other waits for it and uses it (before the lock, the second crashed on the first's `.partial`
    folder). Each says what it downloads the first time."""
    cache = tmp_path / "shared-cache"
    script = (
        "import logging, sys; logging.basicConfig(level=logging.INFO, stream=sys.stdout); "
        "from infra.artifacts import ensure_apicurio_converter; from infra.settings import InfraSettings; "
        "print(ensure_apicurio_converter(InfraSettings.from_env()))"
    )
    env = {**os.environ, "CDC_HOME": str(tmp_path / "home"), "CDC_CACHE_DIR": str(cache)}
    fetches = [
        subprocess.Popen(
            [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        for _ in range(2)
    ]
    outputs = [fetch.communicate(timeout=600) for fetch in fetches]
    for fetch, (out, err) in zip(fetches, outputs, strict=True):
        assert fetch.returncode == 0 and "Traceback" not in err, out + err
    settings = InfraSettings.from_env(home=tmp_path / "home", cache=cache)
    folder = settings.apicurio_converter_plugin
    assert all(out.strip().endswith(str(folder)) for out, _ in outputs)
    assert any(folder.glob("*/*.jar")) and not list(cache.glob("**/*.partial"))
    said = "".join(out for out, _ in outputs)
    assert said.count("first use: downloading apicurio-converter from Maven Central") == 1, said
    assert re.search(r"downloaded apicurio-converter: \d+ MB in [\d.]+ s", said), said
