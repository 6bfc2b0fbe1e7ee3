"""The project's schema registry (Apicurio Registry 2.6, in memory) through its Confluent-compatible API.

It is the session's registry (tests/conftest.py `registry_stack`): its own home folder and port, started
by the infra code like `cdc infra up --registry` does; Confluent's own client (confluent-kafka) and ours
(HttpSchemaRegistryClient) use it. Every test works on subjects of its own.
"""

from __future__ import annotations

import json
import os
import threading
import urllib.request
import uuid

import pytest

from infra.registry import SchemaRegistry
from infra.stack import LocalStack
from schemas.registry_client import HttpSchemaRegistryClient
from schemas.registry_client import SchemaRegistryError as OurRegistryError

confluent_registry = pytest.importorskip(
    "confluent_kafka.schema_registry", reason='needs pip install "confluent-kafka[avro,schemaregistry]"'
)

#: the port the session's registry runs on (tests/conftest.py)
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


@pytest.fixture
def url(schema_registry: SchemaRegistry) -> str:
    return schema_registry.spec.ccompat_url


def subject_level(url: str, subject: str) -> str:
    """A subject's compatibility level, read with the registry's own API (``GET /config/<subject>``)."""
    with urllib.request.urlopen(f"{url}/config/{subject}", timeout=10) as response:
        return json.loads(response.read())["compatibilityLevel"]


def test_status_shows_the_running_registry(registry_stack: LocalStack) -> None:
    rows = {row.service: row for row in registry_stack.status()}
    row = rows["registry"]
    assert row.running and row.pid == registry_stack.registry.process.pid()
    assert row.endpoint == f"http://127.0.0.1:{PORT}/apis/ccompat/v7"
    assert row.log.endswith("logs/registry.log")
    assert not rows["kafka"].running  # the registry's stack runs the registry only


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
    # ids name schemas, not subjects: the same schema under another subject has the same id (as on
    # Confluent's registry), so a reader caching schemas by id never mixes two subjects up
    other = f"cdc-test-{uuid.uuid4().hex[:8]}-key"
    assert HttpSchemaRegistryClient(url).register(other, V1) == schema_id

    # an incompatible evolution under the registry's BACKWARD compatibility fails at once (4xx, no retry)
    from confluent_kafka.schema_registry import SchemaRegistryClient

    SchemaRegistryClient({"url": url}).set_compatibility(subject, "BACKWARD")
    with pytest.raises(OurRegistryError):
        client.register(subject, BAD)


def test_apicurio_checks_nothing_unless_a_subject_has_a_level(url: str) -> None:
    """Why the worker sets a level on the subjects it creates: Apicurio's global level is NONE, so a new
    subject accepts any next schema (Confluent's registry defaults to BACKWARD)."""
    with urllib.request.urlopen(f"{url}/config", timeout=10) as response:
        assert json.loads(response.read())["compatibilityLevel"] == "NONE"
    subject = f"cdc-test-{uuid.uuid4().hex[:8]}-value"
    client = HttpSchemaRegistryClient(url)  # compatibility None: the registry's global level
    first = client.register(subject, V1)
    assert client.register(subject, BAD) != first  # nothing refused it
    assert subject_level(url, subject) == "NONE"


def test_our_client_sets_the_level_on_subjects_it_creates_and_keeps_existing_ones(url: str) -> None:
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    created = f"cdc-test-{uuid.uuid4().hex[:8]}-value"
    client = HttpSchemaRegistryClient(url, compatibility="BACKWARD")
    first = client.register(created, V1)
    assert subject_level(url, created) == "BACKWARD"
    assert client.register(created, V2) != first  # a new optional field passes BACKWARD
    with pytest.raises(OurRegistryError) as raised:
        client.register(created, BAD)
    assert raised.value.status == 409 and created in str(raised.value)

    # a subject an operator made FULL keeps FULL: only subjects the client creates get its level
    confluent = SchemaRegistryClient({"url": url})
    existing = f"cdc-test-{uuid.uuid4().hex[:8]}-value"
    confluent.register_schema(existing, Schema(V1, "AVRO"))
    confluent.set_compatibility(existing, "FULL")
    HttpSchemaRegistryClient(url, compatibility="BACKWARD").register(existing, V2)
    assert subject_level(url, existing) == "FULL"


def test_a_url_without_the_confluent_api_path_is_named_as_the_problem(
    schema_registry: SchemaRegistry,
) -> None:
    """Apicurio serves its own API at the root; a worker given the base URL must say which URL to use."""
    client = HttpSchemaRegistryClient(schema_registry.spec.base_url, compatibility="BACKWARD", retries=0)
    with pytest.raises(OurRegistryError, match=r"HTTP 404.*Confluent-compatible API.*/apis/ccompat/v7"):
        client.register(f"cdc-test-{uuid.uuid4().hex[:8]}-value", V1)


def register_together(
    url: str, subject: str, level: str | None, workers: int
) -> tuple[list[int], list[Exception]]:
    """``workers`` clients (one per worker process) registering V1 under ``subject`` at the same moment:
    the ids they got, and the errors."""
    start = threading.Barrier(workers)
    ids: list[int] = []
    errors: list[Exception] = []

    def register() -> None:
        client = HttpSchemaRegistryClient(url, compatibility=level)
        start.wait()
        try:
            ids.append(client.register(subject, V1))
        except OurRegistryError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=register) for _ in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return ids, errors


@pytest.mark.parametrize("level", [None, "BACKWARD"])
def test_workers_registering_a_new_subject_together_all_get_its_id(url: str, level: str | None) -> None:
    """Every worker of a deployment registers each table's schemas as it starts. Apicurio lets one of
    them create the subject and answers the others 409 ("already exists", and "rule already exists" for
    the level): each must still get the schema's id. (Apicurio may file the racing copies as extra
    versions of the subject, all with that one id: harmless to readers, and not ours to prevent.)"""
    workers = 6
    for _ in range(5):
        subject = f"cdc-test-{uuid.uuid4().hex[:8]}-value"
        ids, errors = register_together(url, subject, level, workers)
        assert not errors, f"{len(errors)} of {workers} registrations failed, first: {errors[0]}"
        assert len(ids) == workers and len(set(ids)) == 1, ids
        with urllib.request.urlopen(f"{url}/subjects/{subject}/versions", timeout=10) as response:
            versions = json.loads(response.read())
        for version in versions:
            with urllib.request.urlopen(
                f"{url}/subjects/{subject}/versions/{version}", timeout=10
            ) as response:
                assert json.loads(response.read())["id"] == ids[0], f"{subject} version {version}"
        assert subject_level(url, subject) == (level or "NONE")
