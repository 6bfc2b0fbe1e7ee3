"""The worker through a Kafka outage: no step waits unbounded, the worker says it is degraded, its lag is
unknown rather than 0 while it cannot know it, and the Kafka client's reconnect errors are summarised.

The core test runs the batch loop in-process with its Kafka connections through a proxy of ours
(runtime/kafka_proxy.py) that refuses connections for as long as a test needs, as a stopped broker does.
The process tests stop the session's broker itself under a steady stream of raw events, with `cdc worker`
processes reading it: one retries through the outage, one whose `outage_timeout_s` is short stops and is
started again once Kafka is back (as a supervisor does). The long outage (four minutes: longer than the
default `outage_timeout_s`, the transaction and session timeouts) is a soak test (`pytest -m soak`);
bench/broker_outage.py measures the recovery.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from app import batch_loop
from app.errors import TransactionFailed
from cdc.verify.oracle import read_topic_records
from infra.stack import LocalStack
from runtime.kafka_clients import stop_client
from runtime.kafka_proxy import END_TXN, KafkaProxy
from runtime.service_process import START_MARKER
from testkit.event_builder import EventBuilder, Write
from tests.integration.agent_harness import wait_until
from tests.integration.test_worker_core import changes, insert, ops, worker_core
from tests.integration.test_worker_core import deploy as deploy_core
from tests.integration.test_worker_liveness import RAW_PARTITIONS, Deployment, deploy, now_us
from tests.integration.worker_harness import WorkerProcess, group_lag, worker_config
from tests.unit.app.support import Record, raw_record

#: how long the proxy refuses connections: far beyond every deadline of the loop
REFUSE_S = 120.0
#: the process tests: raw events written per second, and the short deadline of one worker
WRITES_PER_S = 20
SHORT_TIMEOUT_S = 5
#: mode's warning for a timer tick that took longer than its interval (the expiry timer's)
OVERLAPPING = re.compile(r"^Timer \S+ is overlapping \(interval=\S+ runtime=([0-9.e-]+)\)$")


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
        dep = await deploy_core(kafka_bootstrap)
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


# ---------------------------------------------------------------------------------------------------------
# `cdc worker` processes, the session's broker stopped


class SteadyWriter(threading.Thread):
    """INSERTs of new keys of ``users`` at ``per_s`` to the raw topic, as agents publish them: through an
    outage they wait and go out once Kafka is back, each until acknowledged (one may land twice: a copy
    the worker drops by its digest)."""

    def __init__(self, dep: Deployment, per_s: float) -> None:
        super().__init__(daemon=True)
        self.dep = dep
        self.per_s = per_s
        self.acked: list[int] = []
        self._stopping = threading.Event()
        self.error: BaseException | None = None

    def __enter__(self) -> SteadyWriter:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()
        self.join(60)

    def stop(self) -> None:
        self._stopping.set()

    def finish(self, timeout_s: float) -> list[int]:
        """Stop writing; once every key written is acknowledged, the keys."""
        self._stopping.set()
        self.join(timeout_s)
        assert not self.is_alive(), f"records still unacknowledged {timeout_s:.0f} s after the writes stopped"
        assert self.error is None, repr(self.error)
        return self.acked

    def run(self) -> None:
        try:
            asyncio.run(self._write())
        except BaseException as exc:
            self.error = exc

    async def _write(self) -> None:
        builder = EventBuilder(self.dep.users)
        pending: deque[tuple[int, Record]] = deque()
        producer: AIOKafkaProducer | None = None
        key, next_at = 0, time.monotonic()
        while not self._stopping.is_set() or pending:
            now = time.monotonic()
            if not self._stopping.is_set() and now >= next_at:
                key += 1
                written = now_us()
                event = builder.event(
                    Write(key, (), {"v": key}, ts=written, insert=True), now=written // 10**6
                )
                pending.append((key, raw_record(key % RAW_PARTITIONS, 0, self.dep.users, event)))
                next_at += 1 / self.per_s
            if not pending:
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))
                continue
            try:
                if producer is None:
                    producer = AIOKafkaProducer(
                        bootstrap_servers=self.dep.bootstrap, acks="all", request_timeout_ms=5000
                    )
                    await asyncio.wait_for(producer.start(), 10)
                written_key, record = pending[0]
                await asyncio.wait_for(
                    producer.send_and_wait(
                        self.dep.raw_topic, record.value, key=record.key, partition=record.partition
                    ),
                    10,
                )
                pending.popleft()
                self.acked.append(written_key)
            except (KafkaError, OSError):  # Kafka away: a new producer, and the same record again
                if producer is not None:
                    await stop_client(producer, "the test's writer")
                    producer = None
                await asyncio.sleep(1.0)
        if producer is not None:
            await stop_client(producer, "the test's writer")


@dataclass(slots=True)
class Sample:
    """One look at a worker: when (s since the outage began), its /health, and its lag figures."""

    at: float
    health: dict[str, Any] | None
    lag: dict[str, Any] | None
    lag_ms_sample: float | None


def look(worker: WorkerProcess, since: float) -> Sample:
    health = worker.health()
    stats = worker.get_json("/stats", 3.0)
    lag = stats[1]["lag"] if stats is not None and stats[0] == 200 else None
    metrics = worker.get("/metrics", 3.0)
    lag_ms = None
    if metrics is not None and metrics[0] == 200:
        for line in metrics[1].decode().splitlines():
            if line.startswith("cdc_worker_lag_ms "):
                lag_ms = float(line.split()[1])
    return Sample(time.monotonic() - since, health, lag, lag_ms)


def json_lines(worker: WorkerProcess) -> list[dict[str, Any]]:
    """Every line the worker wrote (after the harness's start markers), each a JSON object."""
    entries = []
    for line in worker.log_text().splitlines():
        if not line or line.startswith(START_MARKER):
            continue
        try:
            entries.append(json.loads(line))
        except ValueError:
            raise AssertionError(f"{worker.name} wrote a line that is not JSON: {line!r}") from None
    return entries


def between(entries: list[dict[str, Any]], start: str, end: str) -> list[dict[str, Any]]:
    return [e for e in entries if start <= e["ts"] < end]


def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + f".{int(time.time() * 1000) % 1000:03d}Z"


def outage_worker(
    dep: Deployment, name: str, app_id: str, *, outage_timeout_s: int | None, heartbeat_interval_ms: int = 0
) -> WorkerProcess:
    extra: dict[str, Any] = {"session_timeout_ms": 6000, "heartbeat_interval_ms": heartbeat_interval_ms}
    if outage_timeout_s is not None:
        extra["outage_timeout_s"] = outage_timeout_s
    config = worker_config(
        bootstrap=dep.bootstrap,
        raw_topic=dep.raw_topic,
        schema_topic=dep.schema_topic,
        raw_partitions=RAW_PARTITIONS,
        data_directory=dep.workdir / f"{name}-data",
        app_id=app_id,
        worker_id=name,
        topic_prefix=f"{app_id}-clean",
        worker=extra,
    )
    return WorkerProcess(dep.workdir, config, name, log_format="json")


def merged(worker: WorkerProcess) -> int:
    got = worker.get_json("/stats", 3.0)
    return int(got[1]["total"]["in"]) if got is not None and got[0] == 200 else 0


def clean_keys(bootstrap: str, worker: WorkerProcess, dep: Deployment) -> Counter[tuple[int, str]]:
    """(key, op) of every committed change event of ``users`` from ``worker``'s app."""
    topic = f"{worker.config['worker']['clean_topic_prefix']}.{dep.users.keyspace}.users"
    found: Counter[tuple[int, str]] = Counter()
    for _, _, _, key, value in asyncio.run(read_topic_records(bootstrap, topic)):
        if value is not None:
            event = json.loads(value)
            found[(json.loads(key)["id"], event["op"])] += 1
    return found


@pytest.mark.parametrize(
    ("outage_s", "survivor_timeout_s"),
    [
        pytest.param(45, None, id="45s"),
        pytest.param(240, None, id="4min", marks=pytest.mark.soak),
    ],
)
def test_through_a_broker_outage_workers_say_so_give_up_at_their_deadline_and_lose_or_repeat_nothing(
    kafka_bootstrap: str,
    local_stack: LocalStack,
    tmp_path: Path,
    outage_s: int,
    survivor_timeout_s: int | None,
) -> None:
    """Two `cdc worker` apps read one raw topic written at 20 raw events/s: ``steady`` (the default
    `outage_timeout_s`, 180 s; heartbeats on) and ``short`` (5 s). Both hold a batch when the broker
    stops: an event of a table whose schema never comes keeps them in it for SCHEMA_WAIT_S, and its
    commit then meets the outage. The broker stays down ``outage_s`` (and until every worker whose
    deadline falls within the outage has stopped):

    - ``short`` stops (exit 1) at its deadline while Kafka is still away: no step waited for Kafka;
      ``steady`` in the 45 s outage retries throughout, in the four-minute one stops at 180 s too;
    - meanwhile `/health` answers `degraded` (Kafka unreachable, commits failing), and the lag is unknown;
    - the worker's log holds JSON lines only, no ERROR of the Kafka client, and few lines: its own story
      of the outage and the client's reconnect errors summarised;
    - after the broker is back (the stopped workers started again, as a supervisor does), no look at a
      worker that owns no raw partition reads lag 0 or `ok`, and both apps emit each write exactly once.
    """
    dep = deploy(kafka_bootstrap, tmp_path)
    steady = outage_worker(
        dep, "steady", dep.app_id, outage_timeout_s=survivor_timeout_s, heartbeat_interval_ms=1000
    )
    short = outage_worker(dep, "short", f"{dep.app_id}-short", outage_timeout_s=SHORT_TIMEOUT_S)
    workers = [steady, short]
    planned = {steady: survivor_timeout_s or 180, short: SHORT_TIMEOUT_S}
    during: list[Sample] = []
    after: list[Sample] = []
    stopped_while_down: dict[str, int | None] = {}
    try:
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.wait_healthy(120)
        with SteadyWriter(dep, WRITES_PER_S) as writer:
            wait_until(lambda: all(merged(w) >= 40 for w in workers), 90, "both workers merging the stream")
            dep.produce(0, dep.unknown, [0], now_us())  # both wait SCHEMA_WAIT_S inside their batch
            time.sleep(3.0)
            down_from = utc_now()
            local_stack.kafka.stop()
            began = time.monotonic()
            try:
                must_stop = [w for w in workers if planned[w] < outage_s]
                while time.monotonic() - began < outage_s or any(w.running for w in must_stop):
                    assert time.monotonic() - began < outage_s + 300, (
                        f"{[w.name for w in must_stop if w.running]} still running "
                        f"{time.monotonic() - began:.0f} s into the outage, beyond its deadline:\n"
                        + "\n".join(w.log_tail() for w in must_stop)
                    )
                    if steady.running:
                        during.append(look(steady, began))
                    time.sleep(2.0)
                for worker in workers:
                    stopped_while_down[worker.name] = None if worker.running else worker.stop()
                down_until, outage_took = utc_now(), time.monotonic() - began
            finally:
                local_stack.kafka.start()  # the session's other tests need the broker
            back = time.monotonic()
            for worker in workers:
                if not worker.running:
                    worker.start()  # as a supervisor does
            while time.monotonic() - back < 120:  # until the steady worker is back in business
                after.append(look(steady, back))
                health, lag = after[-1].health, after[-1].lag
                if health is not None and health["status"] == "ok" and lag and lag["records_behind"] == 0:
                    break
                time.sleep(0.3)
            written = writer.finish(180)
        for worker in workers:
            app_id = worker.config["worker"]["app_id"]
            wait_until(
                lambda app_id=app_id: group_lag(kafka_bootstrap, app_id, dep.raw_topic) == 0,
                180,
                lambda worker=worker: f"{worker.name} to catch up:\n{worker.log_tail()}",
                interval_s=2.0,
            )
        wait_until(
            lambda: (h := steady.health()) is not None and h["status"] == "ok",
            60,
            lambda: f"steady to say ok (last {steady.health()})",
        )
        final = look(steady, back)
    finally:
        for worker in workers:
            worker.ensure_stopped()

    # who stopped during the outage, and why
    for worker in workers:
        if planned[worker] < outage_s:
            assert stopped_while_down[worker.name] == 1, (
                f"{worker.name} did not stop at its deadline ({planned[worker]} s) while Kafka was away:\n"
                f"{worker.log_tail()}"
            )
            assert any(
                f"worker.outage_timeout_s is {planned[worker]}" in e["message"] for e in json_lines(worker)
            ), worker.log_tail()
        else:
            assert stopped_while_down[worker.name] is None, f"{worker.name} stopped:\n{worker.log_tail()}"

    # what the survivor said during the outage (while it ran)
    assert during, "no look at the steady worker during the outage"
    assert all(s.health is not None for s in during), "/health did not answer during the outage"
    late = [s for s in during if s.at >= 20 and s.health is not None]
    assert late and all(s.health is not None and s.health["status"] == "degraded" for s in late), [
        (round(s.at), s.health and s.health["status"]) for s in during
    ]
    assert all(not s.health["kafka_reachable"] for s in late if s.health is not None)
    assert all(s.lag is not None and s.lag["records_behind"] is None for s in late), [s.lag for s in late]
    assert all(s.lag_ms_sample is None for s in late), "cdc_worker_lag_ms had a sample while Kafka was away"

    # after the return: never 0 behind, never ok, from a worker that owns no raw partition
    for sample in after:
        if sample.health is not None and sample.health["partitions_assigned"] == []:
            assert sample.health["status"] != "ok", sample
            assert sample.lag is not None and sample.lag["records_behind"] is None, sample
            assert sample.lag_ms_sample is None, sample
    assert final.lag is not None and final.lag["records_behind"] == 0 and final.lag_ms_sample == 0

    # the logs
    for worker in workers:
        entries = json_lines(worker)
        client_errors = [e for e in entries if e["logger"].startswith("aiokafka") and e["level"] == "ERROR"]
        assert not client_errors, client_errors[:5]
        runtimes = [float(m[1]) for e in entries if (m := OVERLAPPING.search(e["message"])) is not None]
        assert all(runtime < 30 for runtime in runtimes), (
            f"{worker.name}: a timer tick waited {max(runtimes)} s"
        )
    outage_lines = between(json_lines(steady), down_from, down_until)
    minutes = outage_took / 60
    assert len(outage_lines) <= 60 * minutes, (
        f"{len(outage_lines)} log lines in {minutes:.1f} min of outage:\n"
        + "\n".join(e["message"][:160] for e in outage_lines[:80])
    )
    told = [e["message"] for e in outage_lines if e["logger"] == "app.kafka_status"]
    assert any("does not answer" in m for m in told) and any(
        "does not take the worker's commits" in m for m in told
    )

    # each write once, in each app
    expected = Counter({(key, "c"): 1 for key in written})
    for worker in workers:
        got = clean_keys(kafka_bootstrap, worker, dep)
        assert got == expected, (
            f"{worker.name}: missing {sorted(expected - got)[:10]}, repeated or unexpected "
            f"{sorted((got - expected).items())[:10]}"
        )
