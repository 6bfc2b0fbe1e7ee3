"""The publisher recovers from a producer whose idempotence state broke or that keeps records for good,
and notices a silent broker.

The first and last were found by the broker-outage acceptance test: after a 30 s outage every send failed
with OutOfOrderSequenceNumber forever (batches that expired client-side had used sequence numbers), and
during the outage nothing was counted as a send error because aiokafka retries such batches itself. The
second by a fault campaign: after a broker restart one agent's producer held 15 records for eight minutes
while Kafka served everyone else, and the run never became idle.
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

import pytest
from aiokafka.errors import KafkaConnectionError, OutOfOrderSequenceNumber

import agents.publisher as publisher_module
from agents.metrics import AgentMetrics
from agents.publisher import RawPublisher
from runtime.config import KafkaConfig


class FakeProducer:
    """Stands in for the AIOKafkaProducer of make_producer; `behaviour` decides what each send's future becomes."""

    created: ClassVar[list[FakeProducer]] = []

    def __init__(self, behaviour: str, **_: Any) -> None:
        self.behaviour = behaviour
        self.sent: list[bytes] = []
        self.pending: list[asyncio.Future[object]] = []
        self.stopped = False
        FakeProducer.created.append(self)

    async def start(self) -> None:
        if self.behaviour == "down":
            raise KafkaConnectionError("Unable to bootstrap from [('127.0.0.1', 9092)]")

    async def stop(self) -> None:
        self.stopped = True

    async def send(self, topic: str, *, value: bytes, key: bytes) -> asyncio.Future[object]:
        future: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        self.sent.append(value)
        if self.behaviour == "out_of_order":
            future.set_exception(OutOfOrderSequenceNumber())
        elif self.behaviour == "ok":
            future.set_result(object())
        else:
            self.pending.append(future)  # "silent", "stuck": no answer until the test gives one
        return future


class FakeProbe:
    """Stands in for runtime.kafka_probe.KafkaProbe: Kafka answers while `answers` is true."""

    answers = True

    def __init__(self, kafka: KafkaConfig) -> None:
        pass

    async def look(self) -> BaseException | None:
        return None if FakeProbe.answers else KafkaConnectionError("Unable to bootstrap")

    async def stop(self) -> None:
        pass


def install_probe(monkeypatch: pytest.MonkeyPatch, *, answers: bool = True) -> None:
    FakeProbe.answers = answers
    monkeypatch.setattr(publisher_module, "KafkaProbe", FakeProbe)


def send_errors(metrics: AgentMetrics) -> float:
    return metrics.registry.get_sample_value("cdc_agent_send_errors_total") or 0.0


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


def test_producer_failing_with_out_of_order_sequence_is_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, ["out_of_order", "ok"])
    metrics = AgentMetrics()

    async def scenario() -> list[int]:
        publisher = RawPublisher(KafkaConfig(), max_in_flight_bytes=2**20, metrics=metrics)
        assert await publisher.start(asyncio.Event())
        acked: list[int] = []
        for i in range(3):
            await publisher.send("raw", b"k", b"v%d" % i, lambda i=i: acked.append(i))
        assert await publisher.drain(5.0), f"still in flight after 5 s; producers {FakeProducer.created}"
        await publisher.stop()
        return acked

    acked = asyncio.run(scenario())
    first, second = FakeProducer.created
    assert sorted(acked) == [0, 1, 2], f"acknowledged {acked}"
    assert first.stopped, "the broken producer was not closed"
    assert sorted(second.sent) == [b"v0", b"v1", b"v2"], f"resent on the new producer: {second.sent}"
    assert send_errors(metrics) == 3


def test_records_left_unacknowledged_count_as_send_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, ["silent", "down"])  # Kafka is away: no new producer connects either
    metrics = AgentMetrics()

    async def scenario() -> tuple[bool, float, bool]:
        publisher = RawPublisher(
            KafkaConfig(request_timeout_ms=200), max_in_flight_bytes=2**20, metrics=metrics
        )
        assert await publisher.start(asyncio.Event())
        await publisher.send("raw", b"k", b"v", lambda: None)
        await asyncio.sleep(0.5)
        during = (publisher.connected, send_errors(metrics))
        FakeProducer.created[0].pending[0].set_result(object())  # Kafka answers again
        await asyncio.sleep(0)
        after = publisher.connected
        await publisher.stop()
        return during[0], during[1], after

    connected_during, errors, connected_after = asyncio.run(scenario())
    assert not connected_during, "a record unanswered for twice request_timeout_ms left `connected` true"
    assert errors >= 1, "a record unanswered for twice request_timeout_ms was not counted as a send error"
    assert connected_after, "the acknowledgement did not set `connected` again"


def test_failed_sends_are_told_at_once_then_summarised_over_a_window_not_the_machines_uptime(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The first failure is written as it happens; those after it within FAILURE_LOG_INTERVAL_S are
    counted into the next summary. The first summary used to count from the process clock's zero ("1
    sends failed in the last 3,600,412 s" on a machine up for six weeks)."""
    install(monkeypatch, ["out_of_order", "ok"])
    caplog.set_level("WARNING", logger="agents.publisher")

    async def scenario() -> None:
        publisher = RawPublisher(KafkaConfig(), max_in_flight_bytes=2**20, metrics=AgentMetrics())
        assert await publisher.start(asyncio.Event())
        for i in range(3):
            await publisher.send("raw", b"k", b"v%d" % i, lambda: None)
        assert await publisher.drain(5.0)
        await publisher.stop()

    asyncio.run(scenario())
    told = [r.getMessage() for r in caplog.records if "send" in r.getMessage()]
    assert told == [
        "a send to raw failed (OutOfOrderSequenceNumber: [Error 45] OutOfOrderSequenceNumber); resending "
        f"with backoff (further failures are summarised every {publisher_module.FAILURE_LOG_INTERVAL_S:.0f} s)"
    ], told


def test_a_producer_that_keeps_records_while_kafka_answers_is_replaced_and_they_are_resent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A producer that never answers (and whose stop leaves its sends unanswered, as aiokafka's does when
    it cancels its sender) is replaced once a new producer connects; each record is acknowledged once."""
    install(monkeypatch, ["stuck", "ok"])
    metrics = AgentMetrics()

    async def scenario() -> tuple[list[int], bool, float]:
        publisher = RawPublisher(
            KafkaConfig(request_timeout_ms=200), max_in_flight_bytes=2**20, metrics=metrics
        )
        assert await publisher.start(asyncio.Event())
        acked: list[int] = []
        for i in range(3):
            await publisher.send("raw", b"k", b"v%d" % i, lambda i=i: acked.append(i))
        drained = await publisher.drain(10.0)
        FakeProducer.created[0].pending[0].set_result(object())  # a late answer from the old producer
        await asyncio.sleep(0)
        await publisher.stop()
        return acked, drained, send_errors(metrics)

    acked, drained, errors = asyncio.run(scenario())
    stuck, fresh = FakeProducer.created[:2]
    assert drained, f"records still in flight: producers {FakeProducer.created}"
    assert sorted(acked) == [0, 1, 2], f"each record acknowledged once, late answers ignored: {acked}"
    assert stuck.stopped, "the stuck producer was not stopped"
    assert sorted(fresh.sent) == [b"v0", b"v1", b"v2"], f"resent on the new producer: {fresh.sent}"
    assert errors >= 3, "the records the stuck producer kept were not counted as send errors"


def test_an_idle_publisher_follows_kafka_through_its_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    """With nothing to send no acknowledgement tells whether Kafka is there: the metadata probe does,
    both ways (an agent idle through an outage used to say `kafka_connected: true` all along)."""
    install(monkeypatch, ["ok"])
    monkeypatch.setattr(publisher_module, "PROBE_EVERY_S", 0.05)

    async def scenario() -> list[bool]:
        publisher = RawPublisher(KafkaConfig(request_timeout_ms=200), max_in_flight_bytes=2**20,
                                 metrics=AgentMetrics())  # fmt: skip
        assert await publisher.start(asyncio.Event())
        seen = [publisher.connected]
        FakeProbe.answers = False
        await asyncio.sleep(0.4)
        seen.append(publisher.connected)
        FakeProbe.answers = True
        await asyncio.sleep(0.4)
        seen.append(publisher.connected)
        await publisher.stop()
        return seen

    assert asyncio.run(scenario()) == [True, False, True], "connected at start, in the outage, after it"
