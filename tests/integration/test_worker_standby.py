"""Standby copies (worker.standby_replicas): after kill -9 of a partition's owner, the worker that kept a
warm copy takes it over by applying only the changelog's tail, and emits exactly what a worker without a
copy emits.

Two `cdc worker` processes on the session's real Kafka, raw events built with testkit (no Cassandra). Each
scenario is run twice, without and with standbys, on topics of its own; the clean events are read back
read_committed, as consumers must.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer

from cdc.verify.oracle import read_topic_records
from testkit.event_builder import EventBuilder, Write
from tests.integration.agent_harness import wait_until
from tests.integration.test_worker_liveness import Deployment, deploy, now_us
from tests.integration.worker_harness import WorkerProcess, group_lag
from tests.unit.app.support import raw_record

ROWS = 1500
TAIL = 40


def produce(dep: Deployment, partition: int, writes: list[Write]) -> None:
    builder = EventBuilder(dep.users)
    records = [raw_record(partition, 0, dep.users, builder.event(w, now=w.ts // 1_000_000)) for w in writes]

    async def send() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=dep.bootstrap, acks="all", linger_ms=20)
        await producer.start()
        try:
            for record in records:
                await producer.send(dep.raw_topic, record.value, key=record.key, partition=partition)
            await producer.flush()
        finally:
            await producer.stop()

    asyncio.run(send())


def assigned(worker: WorkerProcess) -> list[int]:
    status, health = worker.rest("/health")
    return sorted(health.get("partitions_assigned", [])) if status in (200, 503) else []


def metric(worker: WorkerProcess, name: str) -> float:
    status, text = worker.rest_text("/metrics")
    assert status == 200, text
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{name} not in /metrics of {worker.name}")


def clean_events(dep: Deployment) -> list[tuple[int, str, Any, Any]]:
    """(id, op, before v, after v) of every committed clean event, sorted."""
    records = asyncio.run(read_topic_records(dep.bootstrap, f"{dep.prefix}.{dep.users.keyspace}.users"))
    out = []
    for _, _, _, _, value in records:
        event = json.loads(value)
        image = event["after"] or event["before"]
        out.append(
            (
                image["id"],
                event["op"],
                None if event["before"] is None else event["before"]["v"],
                None if event["after"] is None else event["after"]["v"],
            )
        )
    return sorted(out)


def failover(kafka_bootstrap: str, workdir: Path, standby_replicas: int) -> tuple[list[Any], float, int]:
    """ROWS inserts on each raw partition; kill -9 of partition 0's owner once they are merged; TAIL
    updates of its rows after the kill. The clean events, the changelog records the survivor restored
    when it took partition 0 over, and the records its standby copies applied."""
    dep = deploy(kafka_bootstrap, workdir)
    settings = {"standby_replicas": standby_replicas, "session_timeout_ms": 6000}
    workers = [dep.worker("w1", **settings), dep.worker("w2", **settings)]
    try:
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.wait_healthy(90)
        wait_until(
            lambda: (
                sorted(assigned(workers[0]) + assigned(workers[1])) == [0, 1]
                and all(assigned(w) for w in workers)
            ),
            90,
            lambda: "\n".join(w.log_tail() for w in workers),
        )
        ts = now_us()
        for partition in (0, 1):
            keys = [k for k in range(partition * ROWS, (partition + 1) * ROWS)]
            produce(dep, partition, [Write(k, (), {"v": k}, ts=ts, insert=True) for k in keys])
        wait_until(lambda: group_lag(kafka_bootstrap, dep.app_id, dep.raw_topic) == 0, 120,
                   lambda: "\n".join(w.log_tail() for w in workers))  # fmt: skip
        victim = next(w for w in workers if 0 in assigned(w))
        survivor = next(w for w in workers if w is not victim)
        if standby_replicas:
            wait_until(
                lambda: survivor.rest("/stats")[1]["standby"] == {"partitions": [0], "lag": 0},
                60,
                lambda: f"{survivor.rest('/stats')[1]['standby']}\n{survivor.log_tail()}",
            )
        restored_before = metric(survivor, "cdc_worker_restored_changelog_records_total")
        copied = metric(survivor, "cdc_worker_standby_applied_changelog_records_total")
        victim.kill()
        produce(dep, 0, [Write(k, (), {"v": -k - 1}, ts=ts + 1) for k in range(TAIL)])
        wait_until(lambda: assigned(survivor) == [0, 1], 60, survivor.log_tail)
        wait_until(lambda: group_lag(kafka_bootstrap, dep.app_id, dep.raw_topic) == 0, 120, survivor.log_tail)
        time.sleep(1)
        restored = metric(survivor, "cdc_worker_restored_changelog_records_total") - restored_before
        return clean_events(dep), restored, int(copied)
    finally:
        for worker in workers:
            worker.ensure_stopped()


def test_a_standby_copy_takes_a_partition_over_after_kill_9_by_applying_only_the_tail_and_emits_the_same(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    plain, restored_plain, copied_plain = failover(kafka_bootstrap, tmp_path / "plain", 0)
    warm, restored_warm, copied_warm = failover(kafka_bootstrap, tmp_path / "standby", 1)

    expected = sorted(
        [(k, "c", None, k) for k in range(2 * ROWS)] + [(k, "u", k, -k - 1) for k in range(TAIL)]
    )
    assert plain == expected, "without standbys: each change once, the updates merged with the restored rows"
    assert warm == plain, "with standbys the clean events are those of the path without"
    # without a copy the survivor restores partition 0's whole changelog (a row and a digest entry per
    # insert); with one, only what the victim committed after the copy caught up (nothing: the victim
    # died idle) and the tail's own transactions, which the survivor writes itself
    assert copied_plain == 0
    assert restored_plain >= 2 * ROWS, restored_plain
    assert copied_warm >= 2 * ROWS, copied_warm
    assert restored_warm < 100, f"the standby copy restored {restored_warm} changelog records, not the tail"
