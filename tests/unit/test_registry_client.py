"""Schema registry client against a small in-test HTTP server speaking the two Confluent endpoints."""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterator

import pytest

from runtime.service_process import free_port
from schemas.change_avro import AvroChangeCodec
from schemas.change_event import ChangeSource, change_envelope, change_key
from schemas.registry_client import (
    HttpSchemaRegistryClient,
    InMemorySchemaRegistryClient,
    SchemaRegistryError,
)
from state import PartitionState, apply_with_changes
from testkit.event_builder import NOW, EventBuilder, Write
from tests.schema_registry_stub import RegistryState, running_registry
from tests.unit.state.support import table

SCHEMA = '{"type":"record","name":"r","fields":[{"name":"a","type":"int"}]}'


@pytest.fixture
def registry() -> Iterator[tuple[str, RegistryState]]:
    with running_registry() as served:
        yield served


def test_register_and_get(registry: tuple[str, RegistryState]) -> None:
    url, state = registry
    client = HttpSchemaRegistryClient(url + "/")
    subject = "cdc.ks.t-value"
    schema_id = client.register(subject, SCHEMA)
    assert schema_id == 1
    assert client.register("other/subject", SCHEMA) == 1  # ids are per schema, subjects are escaped
    assert client.get(1) == json.loads(SCHEMA)
    method, path, headers, body = state.requests[0]
    assert (method, path) == ("POST", "/subjects/cdc.ks.t-value/versions")
    assert headers["Content-Type"] == "application/vnd.schemaregistry.v1+json"
    assert json.loads(body) == {"schema": SCHEMA}
    assert state.requests[1][1] == "/subjects/other%2Fsubject/versions"


def test_answers_are_cached(registry: tuple[str, RegistryState]) -> None:
    url, state = registry
    client = HttpSchemaRegistryClient(url)
    for _ in range(3):
        assert client.register("s-value", SCHEMA) == 1
        assert client.get(1)["name"] == "r"
    assert [r[0] for r in state.requests] == ["POST", "GET"]


def test_incompatible_schema_is_a_clear_error(registry: tuple[str, RegistryState]) -> None:
    url, _ = registry
    client = HttpSchemaRegistryClient(url)
    with pytest.raises(SchemaRegistryError) as info:
        client.register("incompatible.ks.t-value", SCHEMA)
    message = str(info.value)
    assert url in message and "'incompatible.ks.t-value'" in message
    assert "HTTP 409" in message and "incompatible with an earlier version" in message
    assert "READER_FIELD_MISSING_DEFAULT_VALUE" in message
    assert (info.value.status, info.value.error_code, info.value.subject) == (
        409,
        409,
        "incompatible.ks.t-value",
    )


def test_invalid_schema_is_a_clear_error(registry: tuple[str, RegistryState]) -> None:
    url, state = registry
    client = HttpSchemaRegistryClient(url, retries=3)
    with pytest.raises(
        SchemaRegistryError,
        match=r"HTTP 422, error code 42201 \(the registry rejects the schema as invalid\)",
    ) as info:
        client.register("invalid-value", SCHEMA)
    assert url in str(info.value) and "'invalid-value'" in str(info.value)
    assert len(state.requests) == 1  # 4xx answers are not retried


def test_unknown_schema_id(registry: tuple[str, RegistryState]) -> None:
    url, _ = registry
    with pytest.raises(
        SchemaRegistryError, match=r"fetching schema id 7 failed with HTTP 404, error code 40403"
    ) as info:
        HttpSchemaRegistryClient(url).get(7)
    assert info.value.schema_id == 7 and url in str(info.value)


def test_unreachable_registry() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    client = HttpSchemaRegistryClient(url, timeout=2, retries=1, backoff_s=0.01)
    with pytest.raises(SchemaRegistryError) as info:
        client.register("cdc.ks.t-key", SCHEMA)
    message = str(info.value)
    assert message.startswith(
        f"schema registry {url} is unreachable while registering a schema under subject 'cdc.ks.t-key'"
    )
    assert "2 attempts" in message


def test_slow_registry_times_out(registry: tuple[str, RegistryState]) -> None:
    url, state = registry
    state.delay_s = 1.0
    client = HttpSchemaRegistryClient(url, timeout=0.2, retries=0)
    with pytest.raises(SchemaRegistryError, match=r"is unreachable while fetching schema id 1 .*timed out"):
        client.get(1)


def test_server_errors_are_retried(registry: tuple[str, RegistryState]) -> None:
    url, state = registry
    state.fail_next = [503, 500]
    client = HttpSchemaRegistryClient(url, retries=2, backoff_s=0.01)
    assert client.register("s-value", SCHEMA) == 1
    assert len(state.requests) == 3
    state.fail_next = [500, 500]
    with pytest.raises(SchemaRegistryError, match="HTTP 500, error code 50001 \\(server error\\)"):
        HttpSchemaRegistryClient(url, retries=1, backoff_s=0.01).register("t-value", SCHEMA)


def test_basic_auth_and_redacted_url(registry: tuple[str, RegistryState]) -> None:
    url, state = registry
    state.password = "s3cret"
    host = url.removeprefix("http://")
    assert HttpSchemaRegistryClient(url, auth=("user", "s3cret")).register("s-value", SCHEMA) == 1
    assert HttpSchemaRegistryClient(f"http://user:s3cret@{host}").register("s-value", SCHEMA) == 1
    client = HttpSchemaRegistryClient(f"http://user:wrong@{host}")
    with pytest.raises(SchemaRegistryError, match="HTTP 401, error code 40101 \\(unauthorized") as info:
        client.register("s-value", SCHEMA)
    assert "wrong" not in str(info.value) and url in str(info.value)
    assert "wrong" not in repr(client)


def test_bad_url_is_refused() -> None:
    with pytest.raises(ValueError, match="must be http:// or https://"):
        HttpSchemaRegistryClient("localhost:8081")


def test_a_path_nothing_serves_is_told_apart_from_an_unknown_subject(
    registry: tuple[str, RegistryState],
) -> None:
    """A bare 404 (no registry error code) means the URL misses the Confluent API's path: say so."""
    url, _ = registry
    with pytest.raises(SchemaRegistryError, match=r"HTTP 404, error code 404 \(no such endpoint") as info:
        HttpSchemaRegistryClient(url + "/apis/registry/v2").register("s-value", SCHEMA)
    assert "/apis/ccompat/v7" in str(info.value)


def test_an_unknown_compatibility_level_is_refused() -> None:
    with pytest.raises(ValueError, match="'backward' must be one of BACKWARD, BACKWARD_TRANSITIVE"):
        HttpSchemaRegistryClient("http://127.0.0.1:8081", compatibility="backward")


def test_in_memory_registry_ids_are_global() -> None:
    memory = InMemorySchemaRegistryClient()
    assert (
        memory.register("a-value", SCHEMA) == memory.register("b-value", json.dumps(json.loads(SCHEMA))) == 1
    )
    assert memory.subjects == {"a-value": [1], "b-value": [1]}
    with pytest.raises(SchemaRegistryError, match="not JSON"):
        memory.register("c-value", "{")


def test_avro_codec_over_http(registry: tuple[str, RegistryState]) -> None:
    """Producer and consumer as separate codecs sharing only the registry."""
    url, state = registry
    schema = table("kv")
    builder = EventBuilder(schema)
    partition = PartitionState(builder.partition_key(1))
    write = Write(1, (2,), {"v": 3, "m": {"k": 4}, "a": {"street": "x", "nr": 5}}, ts=10, insert=True)
    (change,) = apply_with_changes(partition, builder.event(write), schema, NOW)[1]
    envelope = change_envelope(change, schema, ChangeSource("main", "ks", "kv", 10, "n1", 1, 2), 77)

    producer = AvroChangeCodec(HttpSchemaRegistryClient(url), "cdc")
    key = producer.encode_key(schema, change_key(schema, change))
    value = producer.encode_value(schema, envelope)
    subjects = sorted(urllib.parse.unquote(r[1]) for r in state.requests)
    assert subjects == ["/subjects/cdc.ks.kv-key/versions", "/subjects/cdc.ks.kv-value/versions"]

    consumer = AvroChangeCodec(HttpSchemaRegistryClient(url), "cdc")
    assert consumer.decode_key(key) == {"pk": 1, "ck": 2}
    after = consumer.decode_value(value)["after"]
    assert after == {
        "pk": 1,
        "ck": 2,
        "s": None,
        "a": {"street": "x", "nr": 5},
        "l": None,
        "m": {"k": 4},
        "st": None,
        "v": 3,
        "w": None,
    }
