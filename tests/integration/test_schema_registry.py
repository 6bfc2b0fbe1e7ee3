"""The project's schema registry (Apicurio Registry 2.6, in memory) through its Confluent-compatible API.

It runs under its own home folder and port, started and stopped by the infra code like `cdc infra up
--registry` does; Confluent's own client (confluent-kafka) and ours (HttpSchemaRegistryClient) use it.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator

import pytest

from infra.settings import InfraSettings
from infra.stack import LocalStack
from schemas.registry_client import HttpSchemaRegistryClient
from schemas.registry_client import SchemaRegistryError as OurRegistryError

confluent_registry = pytest.importorskip(
    "confluent_kafka.schema_registry", reason='needs pip install "confluent-kafka[avro,schemaregistry]"'
)

#: below the ephemeral range (32768+) and away from the default 8081 of a developer's registry
PORT = int(os.environ.get("CDC_TEST_REGISTRY_PORT", "23081"))


def _record(name: str, fields: list[dict[str, object]]) -> str:
    return json.dumps({"type": "record", "name": name, "namespace": "cdc.test", "fields": fields})


V1 = _record("Row", [{"name": "id", "type": "long"}, {"name": "name", "type": "string"}])
#: BACKWARD-compatible: the new field has a default, so readers of v2 still read v1 data
V2 = _record(
    "Row",
    [
        {"name": "id", "type": "long"},
        {"name": "name", "type": "string"},
        {"name": "email", "type": ["null", "string"], "default": None},
    ],
)
#: incompatible: a new field without a default
BAD = _record(
    "Row",
    [{"name": "id", "type": "long"}, {"name": "name", "type": "string"}, {"name": "age", "type": "int"}],
)


@pytest.fixture(scope="module")
def registry_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    settings = InfraSettings.from_env(home=tmp_path_factory.mktemp("registry-home"), registry_port=PORT)
    stack = LocalStack(settings)
    try:
        timings = stack.up(kafka=False, cassandra=False, registry=True, report=lambda _msg: None)
        assert set(timings) == {"registry"}
        yield stack
    finally:
        stack.down(report=lambda _msg: None)
        assert not stack.registry.is_running()


@pytest.fixture
def url(registry_stack: LocalStack) -> str:
    return registry_stack.registry.spec.ccompat_url


def test_status_shows_the_running_registry(registry_stack: LocalStack) -> None:
    rows = {row.service: row for row in registry_stack.status()}
    row = rows["registry"]
    assert row.running and row.pid == registry_stack.registry.process.pid()
    assert row.endpoint == f"http://127.0.0.1:{PORT}/apis/ccompat/v7"
    assert row.log.endswith("logs/registry.log")
    assert not rows["kafka"].running  # only the registry was asked for


def test_confluent_client_registers_evolves_and_rejects(url: str) -> None:
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    client = SchemaRegistryClient({"url": url})
    subject = f"cdc-test-{uuid.uuid4().hex[:8]}-value"

    first = client.register_schema(subject, Schema(V1, "AVRO"))
    fetched = client.get_schema(first)
    assert json.loads(fetched.schema_str) == json.loads(V1)

    assert client.set_compatibility(subject, "BACKWARD")["compatibility"] == "BACKWARD"
    assert client.get_compatibility(subject) == "BACKWARD"

    second = client.register_schema(subject, Schema(V2, "AVRO"))
    assert second != first
    latest = client.get_latest_version(subject)
    assert latest.version == 2 and latest.schema_id == second
    assert client.get_versions(subject) == [1, 2]

    assert not client.test_compatibility(subject, Schema(BAD, "AVRO"))
    with pytest.raises(SchemaRegistryError) as raised:
        client.register_schema(subject, Schema(BAD, "AVRO"))
    assert raised.value.http_status_code == 409
    assert client.get_versions(subject) == [1, 2]


def test_our_client_registers_and_fetches(url: str) -> None:
    client = HttpSchemaRegistryClient(url)
    subject = f"cdc-test-{uuid.uuid4().hex[:8]}-value"
    schema_id = client.register(subject, V1)
    assert client.register(subject, V1) == schema_id  # same schema, same id
    assert HttpSchemaRegistryClient(url).get(schema_id) == json.loads(V1)  # a fresh client: no cache

    # an incompatible evolution under the registry's BACKWARD compatibility fails at once (4xx, no retry)
    from confluent_kafka.schema_registry import SchemaRegistryClient

    SchemaRegistryClient({"url": url}).set_compatibility(subject, "BACKWARD")
    with pytest.raises(OurRegistryError):
        client.register(subject, BAD)
