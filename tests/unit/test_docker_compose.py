"""docker-compose.yml cannot run here (no Docker engine); it must parse and match the local setup."""

from __future__ import annotations

from pathlib import Path

import yaml

from infra.cassandra import NodeSpec, render_yaml
from infra.settings import CASSANDRA_VERSION, KAFKA_VERSION, InfraSettings

REPO = Path(__file__).resolve().parents[2]


def _compose() -> dict:
    return yaml.safe_load((REPO / "docker-compose.yml").read_text())


def test_services_and_versions_match_local_infra() -> None:
    services = _compose()["services"]
    assert set(services) == {"cassandra", "kafka", "agent", "worker"}
    assert services["cassandra"]["image"] == f"cassandra:{CASSANDRA_VERSION}"
    assert services["kafka"]["image"] == f"apache/kafka:{KAFKA_VERSION}"
    kafka_env = services["kafka"]["environment"]
    assert kafka_env["KAFKA_PROCESS_ROLES"] == "broker,controller"  # KRaft, combined, as locally


def test_cassandra_cdc_settings_match_local_node(tmp_path: Path) -> None:
    script = "\n".join(_compose()["services"]["cassandra"]["command"])
    local = render_yaml(NodeSpec("n", "127.0.0.1", "c", "127.0.0.1:7000", 0, tmp_path, tmp_path / "log"))
    default_period = InfraSettings.from_env(home=tmp_path).commitlog_sync_period_ms
    assert local["cdc_enabled"] is True and "cdc_enabled: true" in script
    assert local["commitlog_sync"] == "periodic"
    assert f"commitlog_sync_period: {default_period}ms" in script
    assert local["commitlog_sync_period"] == f"{default_period}ms"


def test_agent_shares_cassandra_data_and_mounted_files_exist() -> None:
    compose = _compose()
    services = compose["services"]
    cassandra_volume = services["cassandra"]["volumes"][0].split(":")[0]
    assert any(v.split(":")[0] == cassandra_volume for v in services["agent"]["volumes"])
    assert set(compose["volumes"]) >= {cassandra_volume}
    for name in ("agent", "worker"):
        assert services[name]["build"] == "."
        for volume in services[name]["volumes"]:
            source = volume.split(":")[0]
            if source.startswith("./"):
                assert (REPO / source).is_file(), f"{name} mounts missing {source}"
    assert (REPO / "Dockerfile").is_file()
    config = yaml.safe_load((REPO / "config" / "cdc.docker.yaml").read_text())
    assert config["agent"]["cdc_raw_directory"].startswith("/var/lib/cassandra")
