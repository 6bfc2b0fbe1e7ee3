"""The worker through a Kafka outage: no step waits unbounded, the worker says it is degraded, its lag is
unknown rather than 0 while it cannot know it, and the Kafka client's reconnect errors are summarised.

The core tests run the batch loop in-process with its Kafka connections through a proxy of ours
(runtime/kafka_proxy.py) that refuses connections for as long as a test needs, as a stopped broker does.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from aiokafka.errors import KafkaError

from app import batch_loop
from app.errors import TransactionFailed
from runtime.kafka_proxy import END_TXN, KafkaProxy
from tests.integration.test_worker_core import (
    changes,
    deploy,
    insert,
    ops,
    worker_core,
)

#: how long the proxy refuses connections: far beyond every deadline of the loop
REFUSE_S = 120.0


def test_a_batch_whose_commit_meets_an_outage_gives_up_at_its_deadline_while_kafka_is_still_away(
    kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The commit request of a raw partition's transaction is dropped, and Kafka stays away for longer
    than the loop's deadline. The commit is in doubt; the producer that holds it is stopped (aiokafka's
    stop waits for its pending requests, without a deadline) and the partition taken over again, in vain,
    until the deadline: then the batch fails, while Kafka is still away. Once Kafka is back the batch
    commits once."""
    monkeypatch.setattr(batch_loop, "RETRY_FOR_S", 15.0)

    async def main() -> None:
        dep = await deploy(kafka_bootstrap)
        records = await dep.produce(
            [(0, "users", insert(dep, 1, 1, 10)), (1, "users", insert(dep, 2, 2, 10))]
        )
        async with (
            KafkaProxy(kafka_bootstrap) as proxy,
            worker_core(dep, tmp_path, bootstrap=proxy.bootstrap) as core,
        ):
            await core.loop.restore_assigned()
            cut = proxy.cut_before(END_TXN, refuse_s=REFUSE_S)
            began = time.monotonic()
            with pytest.raises((TransactionFailed, KafkaError, OSError)) as failed:
                await core.loop.process(records)
            waited = time.monotonic() - began
            assert cut.is_set(), "the fault never happened: nothing was tested"
            assert proxy.refusing, (
                f"the batch ended {waited:.0f} s after the outage began, once Kafka was back: a step waited "
                f"for Kafka beyond the deadline ({failed.value!r})"
            )
        # the commit request never reached the broker: nothing of the batch shows; a worker started
        # anew (Kafka back) merges it again, once
        assert ops(await changes(kafka_bootstrap, dep.clean_topic())) == []
        async with worker_core(dep, tmp_path / "again") as core:
            await core.loop.restore_assigned()
            assert await core.loop.process(records) == 2
        assert sorted(ops(await changes(kafka_bootstrap, dep.clean_topic()))) == [(1, "c"), (2, "c")]

    asyncio.run(main())
