"""`cdc demo` on secured local services (Kafka SASL_SSL, Cassandra with a password over TLS): the demo's own
clients and the agent and worker it starts all log in, every write gives its change event, and no password
is written anywhere under the services' home (configs carry `file:` references). Then `cdc verify`'s own
clients (oracle reads at ALL, clean-topic reads, raw-topic lag) read what the demo wrote, over the same
security: a whole verify run needs three nodes, too heavy for this check.

Own broker and node, own home and ports below 32768 (see test_secure_infra.py); stopped at the end.
"""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from cassandra_model.system_schema import load_schema_from_session
from cdc.demo.command import run_demo
from cdc.demo.table import KEYSPACE, TABLE
from cdc.demo.topics import CLEAN_TOPIC, RAW_TOPIC
from cdc.local_security import cassandra_config, kafka_config
from cdc.verify.oracle import final_images, read_clean_topic, select_rows
from cdc.verify.pipeline_wait import raw_end_and_lag
from cdc.verify.runner import connect_cluster
from infra.secure import SecureMaterial
from infra.settings import InfraSettings
from infra.stack import LocalStack
from schemas.change_json import JsonChangeCodec

PORTS = {
    "kafka_port": 28392,
    "kafka_controller_port": 28393,
    "cql_port": 28342,
    "storage_port": 28300,
    "jmx_base_port": 28499,
}


@pytest.fixture(scope="module")
def secure_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    home = tmp_path_factory.mktemp("cdc-secure-demo-home")
    stack = LocalStack(InfraSettings.from_env(home=home, secure=True, cassandra_heap_mb=768, **PORTS))
    try:
        yield stack
    finally:
        stack.down(report=lambda _msg: None)


def _holders(root: Path, secrets: list[str], skip: set[Path]) -> dict[Path, int]:
    """Files under `root` (but `skip`) holding any of `secrets`, with how many of them."""
    found: dict[Path, int] = {}
    for folder, _dirs, names in os.walk(root):
        for name in names:
            path = Path(folder) / name
            if path in skip or not path.is_file():
                continue
            content = path.read_bytes()
            hits = sum(1 for secret in secrets if secret.encode() in content)
            if hits:
                found[path] = hits
    return found


def test_demo_runs_on_secured_services_and_writes_no_password(
    secure_stack: LocalStack, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = secure_stack.settings
    assert run_demo(settings, rows=5, rounds=1) == 0, capsys.readouterr().out
    out = capsys.readouterr().out
    assert "every write gave exactly its change event" in out, out

    material: SecureMaterial = secure_stack.secure_material()
    demo = settings.home / "demo"
    for name in ("agent-node1.yaml", "worker.yaml"):
        config = yaml.safe_load((demo / name).read_text())
        assert config["kafka"]["security"]["password"] == f"file:{material.kafka_password_file}", name
    assert yaml.safe_load((demo / "agent-node1.yaml").read_text())["cassandra"]["tls"]["enabled"] is True

    secrets = [material.kafka_password(), material.cassandra_password(), material.key_password()]
    own_files = {material.kafka_password_file, material.cassandra_password_file, material.key_password_file}
    # The broker's PLAIN mechanism checks passwords against its JAAS line (user_cdc=...): that 0600 file
    # is the one place besides the password files that must hold the Kafka password (infra/kafka_sasl.py).
    broker_config = secure_stack.kafka.spec.root / "server.properties"
    holders = _holders(settings.home, secrets, own_files)
    assert set(holders) <= {broker_config}, holders
    assert stat.S_IMODE(broker_config.stat().st_mode) == 0o600
    assert _holders(settings.home, [material.cassandra_password(), material.key_password()], own_files) == {}
    for logs in (settings.logs, demo):
        assert _holders(logs, secrets, set()) == {}, logs
    assert not [s for s in secrets if s in out]

    # cdc verify's clients, with the configs it builds for its own use
    kafka = kafka_config(material, bootstrap_servers=secure_stack.kafka.spec.bootstrap)
    app_id = yaml.safe_load((demo / "worker.yaml").read_text())["worker"]["app_id"]
    end, lag = asyncio.run(raw_end_and_lag(kafka, RAW_TOPIC, app_id))
    assert end > 0 and lag == 0
    cluster = connect_cluster(cassandra_config(material, port=settings.cql_port))
    try:
        session = cluster.connect()
        catalog = load_schema_from_session(session, [KEYSPACE], with_system_schema=False)
        (schema,) = [t for t in catalog.tables() if t.table == TABLE]
        rows = select_rows(session, schema)
    finally:
        cluster.shutdown()
    events = read_clean_topic(kafka, CLEAN_TOPIC, JsonChangeCodec())
    assert rows and final_images(events) == rows
