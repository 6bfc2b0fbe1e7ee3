"""RawPublisher.send_batch (the native core's path): one Kafka batch per partition, resent until acknowledged,
every record's tag acknowledged once, bytes in flight bounded, a producer with broken idempotence replaced.

The producer stands in for aiokafka's (create_batch, send_batch) the way tests/unit/test_agent_publisher.py
stands in for send(): what each batch's future becomes is the test's choice."""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

import pytest
from aiokafka.errors import OutOfOrderSequenceNumber

import agents.publisher as publisher_module
from agents.metrics import AgentMetrics
from agents.publisher import RawPublisher
from runtime.config import KafkaConfig
from tests.unit.test_agent_publisher import install_probe


class FakeBuilder:
    def __init__(self, limit: int) -> None:
        self.records: list[tuple[bytes, bytes]] = []
        self.limit = limit

    def append(self, *, timestamp: Any, key: bytes, value: bytes) -> object | None:
        if len(self.records) >= self.limit:
            return None
        self.records.append((key, value))
        return object()


class FakeProducer:
    created: ClassVar[list[FakeProducer]] = []

    def __init__(self, behaviour: str, **_: Any) -> None:
        self.behaviour = behaviour
        self.batches: list[tuple[int, list[tuple[bytes, bytes]]]] = []
        self.pending: list[asyncio.Future[object]] = []
        self.stopped = False
        FakeProducer.created.append(self)

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        self.stopped = True

    def create_batch(self) -> FakeBuilder:
        return FakeBuilder(limit=3)

    async def send_batch(self, builder: FakeBuilder, topic: str, *, partition: int) -> asyncio.Future[object]:
        future: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        self.batches.append((partition, builder.records))
        if self.behaviour == "out_of_order":
            future.set_exception(OutOfOrderSequenceNumber())
        elif self.behaviour == "ok":
            future.set_result(object())
        else:
            self.pending.append(future)
        return future


def install(monkeypatch: pytest.MonkeyPatch, behaviours: list[str]) -> None:
    FakeProducer.created = []
    queue = list(behaviours)

    def factory(kafka: KafkaConfig, **kwargs: Any) -> FakeProducer:
        return FakeProducer(queue.pop(0) if len(queue) > 1 else queue[0], **kwargs)

    async def no_topics(self: RawPublisher) -> None:
        pass

    monkeypatch.setattr(publisher_module, "make_producer", factory)
    monkeypatch.setattr(RawPublisher, "_ensure_topics", no_topics)
    install_probe(monkeypatch)


def _records(n: int) -> tuple[list[bytes], list[bytes], list[int], list[int]]:
    keys = [b"k%d" % i for i in range(n)]
    values = [b"v%d" % i for i in range(n)]
    return keys, values, [i % 2 for i in range(n)], [100 + i for i in range(n)]


def test_each_partition_is_sent_in_batches_and_every_tag_acknowledged_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    install(monkeypatch, ["ok"])
    metrics = AgentMetrics()

    async def scenario() -> list[int]:
        publisher = RawPublisher(KafkaConfig(), max_in_flight_bytes=2**20, metrics=metrics)
        assert await publisher.start(asyncio.Event())
        acked: list[int] = []
        await publisher.send_batch("raw", *_records(8), acked.extend)
        assert await publisher.drain(5.0)
        await publisher.stop()
        return acked

    acked = asyncio.run(scenario())
    assert sorted(acked) == list(range(100, 108))
    [producer] = FakeProducer.created
    by_partition = {p: [k for b in producer.batches if b[0] == p for k, _ in b[1]] for p in (0, 1)}
    assert by_partition == {0: [b"k0", b"k2", b"k4", b"k6"], 1: [b"k1", b"k3", b"k5", b"k7"]}, (
        "log order kept"
    )
    assert all(len(records) <= 3 for _, records in producer.batches), "a full builder starts the next batch"


def test_a_batch_failing_with_out_of_order_sequence_is_resent_on_a_new_producer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    install(monkeypatch, ["out_of_order", "ok"])
    metrics = AgentMetrics()

    async def scenario() -> list[int]:
        publisher = RawPublisher(KafkaConfig(), max_in_flight_bytes=2**20, metrics=metrics)
        assert await publisher.start(asyncio.Event())
        acked: list[int] = []
        await publisher.send_batch("raw", *_records(5), acked.extend)
        assert await publisher.drain(5.0), f"still in flight; producers {FakeProducer.created}"
        await publisher.stop()
        return acked

    acked = asyncio.run(scenario())
    first, second = FakeProducer.created
    assert sorted(acked) == list(range(100, 105)), "each record acknowledged once"
    assert first.stopped, "the broken producer was not closed"
    assert sorted(k for _, records in second.batches for k, _ in records) == sorted(_records(5)[0])
    assert metrics.registry.get_sample_value("cdc_agent_send_errors_total") == 5


def test_bytes_in_flight_stay_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, ["silent"])
    metrics = AgentMetrics()

    async def scenario() -> tuple[int, int, list[int]]:
        publisher = RawPublisher(KafkaConfig(), max_in_flight_bytes=10, metrics=metrics)
        assert await publisher.start(asyncio.Event())
        acked: list[int] = []
        sending = asyncio.get_running_loop().create_task(
            publisher.send_batch("raw", *_records(4), acked.extend)
        )
        await asyncio.sleep(0.1)
        [producer] = FakeProducer.created
        waiting = len(producer.batches)  # the first partition's part is out; the second waits for room
        for future in producer.pending:
            future.set_result(object())
        await asyncio.wait_for(sending, 5)
        for future in producer.pending:
            if not future.done():
                future.set_result(object())
        assert await publisher.drain(5.0)
        await publisher.stop()
        return waiting, len(producer.batches), acked

    waiting, sent, acked = asyncio.run(scenario())
    assert waiting == 1 and sent == 2
    assert sorted(acked) == [100, 101, 102, 103]
