"""docker-compose.yml cannot run here (no Docker engine); it must parse and match the local setup."""

from __future__ import annotations

import tomllib
from dataclasses import fields
from pathlib import Path

import yaml

from infra.cassandra import NodeSpec, render_yaml
from infra.settings import CASSANDRA_VERSION, KAFKA_VERSION, REGISTRY_VERSION, InfraSettings
from runtime.config import AgentConfig, WorkerConfig

REPO = Path(__file__).resolve().parents[2]


def _compose() -> dict:
    return yaml.safe_load((REPO / "docker-compose.yml").read_text())


def _workers(services: dict) -> dict[str, dict]:
    return {name: spec for name, spec in services.items() if name.startswith("worker")}


def _default(config_class: type, name: str):
    return next(f.default for f in fields(config_class) if f.name == name)


def test_services_and_versions_match_local_infra() -> None:
    services = _compose()["services"]
    assert set(services) == {"cassandra", "kafka", "registry", "agent", "worker-1", "worker-2"}
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
    for name in ("agent", *_workers(services)):
        assert services[name]["build"] == {"context": ".", "target": "app"}, name
        for volume in services[name]["volumes"]:
            source = volume.split(":")[0]
            if source.startswith("./"):
                assert (REPO / source).is_file(), f"{name} mounts missing {source}"
    assert (REPO / "Dockerfile").is_file()
    config = yaml.safe_load((REPO / "config" / "cdc.docker.yaml").read_text())
    assert config["agent"]["cdc_raw_directory"].startswith("/var/lib/cassandra")


def _listeners(value: str) -> dict[str, tuple[str, int]]:
    """`NAME://host:port,...` as {NAME: (host, port)}."""
    parsed = {}
    for item in value.split(","):
        name, _, address = item.partition("://")
        host, _, port = address.rpartition(":")
        assert name and port.isdigit(), f"bad listener {item!r}"
        assert name not in parsed, f"listener {name} twice"
        parsed[name] = (host, int(port))
    return parsed


def test_kafka_listeners_parse_and_the_external_one_is_published() -> None:
    kafka = _compose()["services"]["kafka"]
    env = kafka["environment"]
    listeners = _listeners(env["KAFKA_LISTENERS"])
    advertised = _listeners(env["KAFKA_ADVERTISED_LISTENERS"])
    protocols = dict(item.split(":") for item in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
    assert set(protocols) == set(listeners)
    assert env["KAFKA_CONTROLLER_LISTENER_NAMES"] in listeners
    assert env["KAFKA_INTER_BROKER_LISTENER_NAME"] in advertised
    assert env["KAFKA_CONTROLLER_LISTENER_NAMES"] not in advertised  # a combined node advertises brokers only
    for name, (_, port) in advertised.items():
        assert listeners[name][1] == port, f"{name} advertised on {port}, listens on {listeners[name][1]}"
    voter = env["KAFKA_CONTROLLER_QUORUM_VOTERS"].split("@")[1]
    assert voter == f"kafka:{listeners[env['KAFKA_CONTROLLER_LISTENER_NAMES']][1]}"
    # Containers use kafka:9092 (the config's bootstrap_servers); the host uses the EXTERNAL listener.
    config = yaml.safe_load((REPO / "config" / "cdc.docker.yaml").read_text())
    assert advertised["PLAINTEXT"] == ("kafka", 9092)
    assert config["kafka"]["bootstrap_servers"] == "kafka:9092"
    host, port = advertised["EXTERNAL"]
    assert host == "localhost"
    assert f"{port}:{listeners['EXTERNAL'][1]}" in kafka["ports"]


def test_host_ports_are_unique_and_metrics_published() -> None:
    services = _compose()["services"]
    published: dict[int, str] = {}
    for name, spec in services.items():
        for mapping in spec.get("ports", []):
            host_port = int(str(mapping).split(":")[-2])
            assert host_port not in published, f"{name} and {published[host_port]} both publish {host_port}"
            published[host_port] = name
    config = yaml.safe_load((REPO / "config" / "cdc.docker.yaml").read_text())
    agent_port = config["agent"].get("metrics_port", _default(AgentConfig, "metrics_port"))
    assert config["agent"]["metrics_bind"] == "0.0.0.0"
    assert any(str(m).endswith(f":{agent_port}") for m in services["agent"]["ports"])
    web_port = config["worker"].get("web_port", _default(WorkerConfig, "web_port"))
    assert config["worker"]["web_bind"] == "0.0.0.0"
    for name, spec in _workers(services).items():
        assert any(str(m).endswith(f":{web_port}") for m in spec["ports"]), name
    assert published[9042] == "cassandra"


def test_workers_have_stable_unique_ids_and_own_state() -> None:
    compose = _compose()
    workers = _workers(compose["services"])
    assert len(workers) >= 2
    ids = [spec["environment"]["CDC__WORKER__WORKER_ID"] for spec in workers.values()]
    assert len(set(ids)) == len(ids) and all(ids)
    config = yaml.safe_load((REPO / "config" / "cdc.docker.yaml").read_text())
    state_volumes = []
    for name, spec in workers.items():
        sources = [
            v.split(":")[0] for v in spec["volumes"] if v.split(":")[1] == config["worker"]["data_directory"]
        ]
        assert len(sources) == 1, f"{name} needs one volume at the worker's data_directory"
        state_volumes.append(sources[0])
    assert len(set(state_volumes)) == len(state_volumes)
    assert set(compose["volumes"]) >= set(state_volumes)


def test_kafka_clients_wait_for_kafka() -> None:
    services = _compose()["services"]
    for name in ("agent", *_workers(services)):
        assert "kafka" in services[name]["depends_on"], f"{name} talks to Kafka but does not depend on it"
    assert services["agent"]["depends_on"]["cassandra"]["condition"] == "service_healthy"
    for name, spec in services.items():
        for dependency in spec.get("depends_on", {}):
            assert dependency in services, f"{name} depends on unknown {dependency}"


def test_registry_in_memory_and_its_ccompat_url_documented() -> None:
    services = _compose()["services"]
    # Apicurio 2.x has one image per storage; -mem is the in-memory one (3.x merged them into one image).
    assert services["registry"]["image"] == f"apicurio/apicurio-registry-mem:{REGISTRY_VERSION}"
    assert "8080:8080" in services["registry"]["ports"]
    text = (REPO / "docker-compose.yml").read_text()
    assert "http://registry:8080/apis/ccompat/v7" in text
    for name in _workers(services):
        assert "registry" in services[name]["depends_on"]


def _dockerfile_stages() -> dict[str, list[str]]:
    """Instructions of each stage, by stage name, continuation lines joined, comments dropped."""
    text = (REPO / "Dockerfile").read_text().replace("\\\n", " ")
    stages: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        instruction = line.split()[0].upper()
        assert instruction in {"FROM", "WORKDIR", "COPY", "RUN", "ENTRYPOINT", "ENV", "ARG", "CMD"}, line
        if instruction == "FROM":
            words = line.split()
            assert len(words) == 4 and words[2].upper() == "AS", f"unnamed stage: {line}"
            current = stages.setdefault(words[3], [])
        assert current is not None, "instruction before FROM"
        current.append(line)
    return stages


def test_dockerfile_builds_the_app_without_spark_and_the_pipeline_with_it() -> None:
    stages = _dockerfile_stages()
    assert list(stages)[-1] == "app"  # a plain `docker build .` gives the agent and worker image
    app_runs = [line for line in stages["app"] if line.startswith("RUN")]
    assert app_runs == ["RUN pip install --no-cache-dir ."]
    pipeline_runs = " ".join(line for line in stages["pipeline"] if line.startswith("RUN"))
    assert "pip install --no-cache-dir '.[pipeline]'" in pipeline_runs
    assert "openjdk-17-jre-headless" in pipeline_runs  # Spark runs on a JVM
    # Every package pip installs (except the test kit) is copied into the image, and every copy exists.
    include = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    packages = {pattern.rstrip("*") for pattern in include["include"]} - {"testkit"}
    copied = set()
    for stage in stages.values():
        for line in stage:
            if line.startswith("COPY"):
                sources = line.split()[1:-1]
                for source in sources:
                    assert (REPO / source).exists(), f"Dockerfile copies missing {source}"
                copied.update(sources)
            if line.startswith("FROM") and line.split()[1] not in stages:
                assert line.split()[1].startswith("python:3.11"), line
    assert packages <= copied, f"not copied: {sorted(packages - copied)}"
    assert {"pyproject.toml", "README.md"} <= copied
