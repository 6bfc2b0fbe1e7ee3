"""TransactionalSink without a broker; its Kafka paths are in tests/integration/test_worker_core.py."""

from __future__ import annotations

import asyncio

import pytest

from app.errors import TransactionFailed
from app.transactional_sink import TransactionalSink
from runtime.config import KafkaConfig
from tests.integration.agent_harness import free_port


def test_begin_before_start_is_a_retryable_failure() -> None:
    """What the batch loop meets after a restart of the producer failed: not fatal, so it retries."""
    sink = TransactionalSink(
        KafkaConfig(bootstrap_servers=f"127.0.0.1:{free_port()}"), "app-w1", transaction_timeout_ms=10_000
    )
    with pytest.raises(TransactionFailed) as failed:
        asyncio.run(sink.begin())
    assert not failed.value.fatal
    assert "app-w1" in str(failed.value) and "not started" in str(failed.value)


def test_the_step_timeout_is_the_transaction_timeout_but_never_under_ten_seconds() -> None:
    kafka = KafkaConfig(bootstrap_servers="127.0.0.1:1")
    short = TransactionalSink(kafka, "a", transaction_timeout_ms=2_000)
    long = TransactionalSink(kafka, "b", transaction_timeout_ms=60_000)
    assert (short.timeout_s, long.timeout_s) == (10.0, 60.0)
