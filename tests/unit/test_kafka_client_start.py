"""start_kafka_client while Kafka is coming up: a broker that is starting can answer metadata with no
broker in it, and aiokafka's transactional producer then fails an assertion looking for its coordinator
(seen in the 200,000-operation soak at a broker restart: the worker stopped on "Did we not perform
bootstrap?"). That is Kafka not ready, to be waited out, not a crash. The state cannot be produced on
demand from a real broker, so the client here raises what aiokafka raised."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka.errors import KafkaConnectionError, KafkaError

from runtime.config import KafkaConfig
from runtime.kafka_clients import KafkaAccessError, start_kafka_client


class StartingBroker:
    """A client whose start meets a broker that answered metadata without brokers."""

    def __init__(self) -> None:
        self.stopped = False

    async def start(self) -> None:
        raise AssertionError("Did we not perform bootstrap?")

    async def stop(self) -> None:
        self.stopped = True


def test_a_broker_answering_without_brokers_is_kafka_not_ready_and_the_client_is_stopped() -> None:
    client = StartingBroker()
    kafka = KafkaConfig(bootstrap_servers="127.0.0.1:1")
    with pytest.raises(KafkaConnectionError, match=r"127\.0\.0\.1:1 is not ready .*bootstrap") as caught:
        asyncio.run(start_kafka_client(client, kafka))
    assert isinstance(caught.value, KafkaError) and not isinstance(caught.value, KafkaAccessError)
    assert client.stopped
