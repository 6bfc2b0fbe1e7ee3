"""`/health` and the outage's story in the log (app/worker_health.py, app/kafka_status.py), on times given
by hand; tests/integration/test_worker_outage.py checks them on a worker whose broker is stopped."""

from __future__ import annotations

import asyncio
import logging

import pytest

from app.consumer_lag import ConsumerLag, LagFigures
from app.kafka_status import SUMMARY_EVERY_S, KafkaStatus
from app.worker_health import worker_health
from runtime.config import KafkaConfig
from runtime.kafka_probe import KafkaProbe
from tests.integration.agent_harness import free_port

NOW_MS = 1_800_000_000_000


def known_lag() -> LagFigures:
    lag = ConsumerLag()
    lag.watch({0: 5}.get)
    lag.assign({0})
    lag.start_at({0: 5})
    return lag.figures(NOW_MS)


def health(
    kafka: KafkaStatus, lag: LagFigures, *, lifecycle: str = "ok", now: float = 100.0
) -> tuple[int, dict[str, object]]:
    return worker_health(
        lifecycle=lifecycle,
        worker_id="w1",
        assigned={0},
        ready={0},
        tables_known=2,
        core="native",
        kafka=kafka,
        lag=lag,
        failed=None,
        now=now,
    )


def test_a_worker_that_commits_and_knows_its_lag_is_ok() -> None:
    status, body = health(KafkaStatus("k:9092", 180), known_lag())
    assert status == 200
    assert body == {
        "status": "ok",
        "worker_id": "w1",
        "partitions_assigned": [0],
        "partitions_ready": [0],
        "tables_known": 2,
        "core": "native",
        "kafka_reachable": True,
        "kafka_committing": True,
        "lag_known": True,
        "problems": [],
    }


def test_kafka_not_answering_and_commits_failing_make_it_degraded_and_say_why() -> None:
    kafka = KafkaStatus("k:9092", 180)
    kafka.did_not_answer(ConnectionRefusedError("refused"), 10.0)
    kafka.commit_failed("batch", TimeoutError("no answer"), 12.0)

    status, body = health(kafka, known_lag(), now=40.0)

    assert status == 200 and body["status"] == "degraded"
    assert (body["kafka_reachable"], body["kafka_committing"]) == (False, False)
    problems = body["problems"]
    assert isinstance(problems, list) and len(problems) == 2
    assert problems[0].startswith("Kafka at k:9092 has not answered since ") and "(30 s;" in problems[0]
    assert "no transaction has committed since" in problems[1] and "(28 s, 1 failed attempts" in problems[1]
    assert "worker.outage_timeout_s" in problems[1]

    kafka.answered(41.0)
    kafka.committed(42.0)
    assert health(kafka, known_lag(), now=43.0)[1]["status"] == "ok"


def test_a_worker_that_does_not_know_its_lag_is_degraded_not_ok() -> None:
    """After a broker came back: running, no partition yet, raw records waiting for the group."""
    no_partition = ConsumerLag().figures(NOW_MS)

    status, body = health(KafkaStatus("k:9092", 180), no_partition)

    assert (status, body["status"], body["lag_known"]) == (200, "degraded", False)
    assert body["problems"] == [f"lag unknown: {no_partition.unknown}"]


def test_starting_and_failed_are_kept_and_failed_answers_503() -> None:
    no_partition = ConsumerLag().figures(NOW_MS)
    assert health(KafkaStatus("k:9092", 180), no_partition, lifecycle="starting")[1]["status"] == "starting"
    status, body = worker_health(
        lifecycle="failed",
        worker_id="w1",
        assigned=set(),
        ready=set(),
        tables_known=0,
        core="python",
        kafka=KafkaStatus("k:9092", 180),
        lag=no_partition,
        failed=RuntimeError("fenced"),
        now=1.0,
    )
    assert (status, body["status"], body["error"]) == (503, "failed", "fenced")


def test_an_outage_is_told_when_it_starts_every_summary_period_and_when_it_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Not one line per failed attempt: a ten-minute outage with attempts every few seconds is about
    twenty lines of the worker's own."""
    caplog.set_level(logging.INFO, logger="app.kafka_status")
    kafka = KafkaStatus("k:9092", 180)
    attempts = 0
    t = 0.0
    while t < 600:
        kafka.did_not_answer(ConnectionRefusedError("refused"), t)
        kafka.commit_failed("batch", ConnectionRefusedError("refused"), t)
        attempts += 1
        t += 2.5
    kafka.answered(t)
    kafka.committed(t + 1)

    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    summaries = 600 / SUMMARY_EVERY_S
    assert len(lines) <= 2 * (summaries + 2), lines
    assert lines[0] == (
        "WARNING",
        "Kafka at k:9092 does not answer (ConnectionRefusedError('refused')): the worker's lag is unknown "
        "until it does",
    )
    assert lines[1][0] == "WARNING" and "retried for up to 180 s (worker.outage_timeout_s)" in lines[1][1]
    assert any("has not answered for 30 s" in m for _, m in lines)
    assert lines[-2] == (
        "INFO",
        f"Kafka at k:9092 answers again after 600 s ({attempts} probes failed; the client's connection errors "
        "meanwhile are summarised above)",
    )
    assert lines[-1] == (
        "INFO",
        f"Kafka takes the worker's commits again after 601 s ({attempts} failed attempts)",
    )


def test_the_seconds_since_the_first_failure_are_what_the_deadline_counts() -> None:
    kafka = KafkaStatus("k:9092", 180)
    assert kafka.commit_failed("batch", OSError("x"), 50.0) == 0.0
    assert kafka.commit_failed("expiry", OSError("x"), 80.0) == 30.0
    kafka.committed(81.0)
    assert kafka.commit_failed("batch", OSError("x"), 90.0) == 0.0, "a new outage counts from its start"


def test_the_probe_reports_a_kafka_that_does_not_answer_and_leaves_no_client_behind() -> None:
    """Nothing listens on its bootstrap port: the look fails (within its timeout: the probe never waits
    for Kafka), and the next look starts a client of its own again."""
    probe = KafkaProbe(KafkaConfig(bootstrap_servers=f"127.0.0.1:{free_port()}", request_timeout_ms=2_000))

    async def twice() -> list[BaseException | None]:
        return [await probe.look(), await probe.look()]

    first, second = asyncio.run(twice())
    assert isinstance(first, Exception) and isinstance(second, Exception), (first, second)
    assert probe._admin is None
