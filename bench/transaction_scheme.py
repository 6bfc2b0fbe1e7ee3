"""What a batch's commit costs under each fencing scheme: one transaction per batch (no fencing of a worker that
lost its partitions), one per raw partition (the worker's scheme, app/partition_producers.py), and one per
batch with KIP-447 group metadata (confluent-kafka, the client that could fence by group membership).

Starts a Kafka broker of its own in a temporary home (127.0.0.1:29392, controller 29393), then, for
--rounds rounds with the order of the schemes rotating, commits --batches batches of what one worker batch
of --events raw events at three copies per change writes: per raw partition (--partitions of them),
--clean-records change events of 400 bytes (3-partition clean topic, keyed) and --changelog-records state
records of 100 bytes (its changelog partition), and the raw offsets:

  one            the worker's TransactionalSink with one transactional id: all partitions' records and
                 offsets in one transaction (the worker before issue 27)
  per-partition  one TransactionalSink per raw partition (`<app>-<p>`), each partition's records and offset
                 in its own transaction, the commits concurrent (the worker now)
  kip447         confluent-kafka 2.x: one transactional producer, offsets sent with the group metadata of a
                 consumer in the group (KIP-447); records produced one by one (librdkafka batches them)
  per-partition-overlap
                 per-partition as the worker did it before: each transaction's offsets sent while its
                 records were still in flight (their round trips overlapping); a broker of Kafka 3.6+ then
                 turns records back with NOT_ENOUGH_REPLICAS (KIP-890's check meeting the coordinator busy
                 with the offsets), and aiokafka sends them again: counted as `turned back` per batch

--schemes picks some of them; --kafka-port/--controller-port move the broker (default 29392/29393).

Reported per scheme: wall ms per batch, and CPU ms per batch of this process (all its threads: asyncio's
and librdkafka's). The broker's CPU is not counted. The worker's own merge costs about 34 CPU-µs per raw
event (bench/worker_pipeline.md), so a batch of 5,000 events costs about 170 CPU-ms besides its commit.

    .venv/bin/python bench/transaction_scheme.py [--rounds 5] [--batches 40] [--partitions 12]
        [--clean-records 140] [--changelog-records 500] [--schemes S ...] [--kafka-port P]
        [--controller-port P] [--out bench/transaction_scheme.md]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from aiokafka import TopicPartition  # noqa: E402

from app.transactional_sink import OpenTransaction, Outgoing, TransactionalSink  # noqa: E402
from infra.settings import InfraSettings  # noqa: E402
from runtime.config import KafkaConfig  # noqa: E402
from runtime.kafka_topics import TopicSpec, ensure_topics  # noqa: E402

KAFKA_PORT, KAFKA_CONTROLLER_PORT = 29392, 29393
SCHEMES = ("one", "per-partition", "kip447", "per-partition-overlap")


class TurnedBack(logging.Handler):
    """Counts aiokafka's warnings of records the broker turned back with NOT_ENOUGH_REPLICAS."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "NotEnoughReplicas" in record.getMessage():
            self.count += 1


async def _deliver_overlapping(
    self: OpenTransaction, offsets: dict[TopicPartition, int], group_id: str
) -> list[tuple[Any, int]]:
    """OpenTransaction._deliver as it was: the offsets first, while the records are in flight."""
    if offsets:
        await self.producer.send_offsets_to_transaction(dict(offsets), group_id)
    written = await asyncio.gather(*(delivered for delivered, _ in self.pending))
    return list(zip(written, (count for _, count in self.pending), strict=True))


async def run_per_partition_overlap(kafka: KafkaConfig, work: Workload, batches: int) -> None:
    ordered = OpenTransaction._deliver
    OpenTransaction._deliver = _deliver_overlapping  # type: ignore[method-assign,assignment]
    try:
        await run_per_partition(kafka, work, batches)
    finally:
        OpenTransaction._deliver = ordered  # type: ignore[method-assign]


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


class Workload:
    """The records of one batch, per raw partition, and the topics they go to."""

    def __init__(self, args: argparse.Namespace, tag: str) -> None:
        self.raw, self.clean, self.changelog = f"{tag}.raw", f"{tag}.clean", f"{tag}.changelog"
        self.group = f"{tag}.group"
        self.partitions = args.partitions
        rng = random.Random(7)
        self.records: dict[int, list[Outgoing]] = {
            p: [
                *(
                    (self.clean, rng.randbytes(16), rng.randbytes(400), None, ())
                    for _ in range(args.clean_records)
                ),
                *(
                    (self.changelog, rng.randbytes(40), rng.randbytes(100), p, ())
                    for _ in range(args.changelog_records)
                ),
            ]
            for p in range(args.partitions)
        }
        self.offset = 0

    def topics(self) -> list[TopicSpec]:
        return [
            TopicSpec(self.raw, self.partitions, 1),
            TopicSpec(self.clean, 3, 1, {"cleanup.policy": "compact"}),
            TopicSpec(self.changelog, self.partitions, 1, {"cleanup.policy": "compact"}),
        ]

    def next_offsets(self) -> dict[int, int]:
        self.offset += 5000 // self.partitions
        return dict.fromkeys(range(self.partitions), self.offset)


async def run_one(kafka: KafkaConfig, work: Workload, batches: int) -> None:
    sink = TransactionalSink(kafka, f"{work.group}-w1", transaction_timeout_ms=20_000)
    await sink.start()
    try:
        for _ in range(batches):
            tx = await sink.begin()
            await tx.send_all(r for p in range(work.partitions) for r in work.records[p])
            offsets = {TopicPartition(work.raw, p): o for p, o in work.next_offsets().items()}
            await tx.commit(offsets, work.group)
    finally:
        await sink.stop()


async def run_per_partition(kafka: KafkaConfig, work: Workload, batches: int) -> None:
    sinks = {
        p: TransactionalSink(kafka, f"{work.group}-{p}", transaction_timeout_ms=20_000)
        for p in range(work.partitions)
    }
    await asyncio.gather(*(s.start() for s in sinks.values()))

    async def commit(p: int, offset: int) -> None:
        tx = await sinks[p].begin()
        await tx.send_all(work.records[p])
        await tx.commit({TopicPartition(work.raw, p): offset}, work.group)

    try:
        for _ in range(batches):
            await asyncio.gather(*(commit(p, o) for p, o in work.next_offsets().items()))
    finally:
        for sink in sinks.values():
            await sink.stop()


def run_kip447(bootstrap: str, work: Workload, batches: int) -> None:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka import TopicPartition as CTopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": work.group, "enable.auto.commit": False})
    consumer.subscribe([work.raw])
    deadline = time.monotonic() + 60
    while not consumer.assignment():  # the group metadata needs a member with an assignment
        consumer.poll(0.2)
        if time.monotonic() > deadline:
            raise RuntimeError(f"the kip447 consumer got no assignment of {work.raw}")
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"{work.group}-kip447",
            "linger.ms": 0,
            "enable.idempotence": True,
        }
    )
    producer.init_transactions(30)
    try:
        for _ in range(batches):
            producer.begin_transaction()
            for p in range(work.partitions):
                for topic, key, value, partition, _ in work.records[p]:
                    if partition is None:
                        producer.produce(topic, value, key)
                    else:
                        producer.produce(topic, value, key, partition=partition)
                    producer.poll(0)
            offsets = [CTopicPartition(work.raw, p, o) for p, o in work.next_offsets().items()]
            producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 30)
            producer.commit_transaction(30)
    finally:
        consumer.close()


def measure(run: Callable[[], None], batches: int) -> tuple[float, float, float]:
    """(wall ms, CPU ms of this process, records turned back) per batch."""
    turned_back = TurnedBack()
    client_log = logging.getLogger("aiokafka")
    client_log.addHandler(turned_back)
    wall, cpu = time.perf_counter(), time.process_time()
    try:
        run()
    finally:
        client_log.removeHandler(turned_back)
    return (
        (time.perf_counter() - wall) * 1000 / batches,
        (time.process_time() - cpu) * 1000 / batches,
        turned_back.count / batches,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batches", type=int, default=40, help="batches per scheme per round")
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--clean-records", type=int, default=140, help="change events per raw partition")
    parser.add_argument("--changelog-records", type=int, default=500, help="state records per raw partition")
    parser.add_argument("--schemes", nargs="+", choices=SCHEMES, default=list(SCHEMES))
    parser.add_argument("--kafka-port", type=int, default=KAFKA_PORT)
    parser.add_argument("--controller-port", type=int, default=KAFKA_CONTROLLER_PORT)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    from infra.kafka import KafkaBroker, broker_spec

    logging.getLogger("aiokafka").setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="txn-scheme-") as home:
        settings = InfraSettings.from_env(
            home=Path(home), kafka_port=args.kafka_port, kafka_controller_port=args.controller_port
        )
        broker = KafkaBroker(broker_spec(settings), settings)
        say(f"load average before start: {os.getloadavg()}; starting Kafka on 127.0.0.1:{args.kafka_port}")
        broker.start()
        try:
            results = bench(args, f"127.0.0.1:{args.kafka_port}")
        finally:
            broker.stop()
    report = render(args, results)
    print(report)
    if args.out is not None:
        args.out.write_text(report)


def bench(args: argparse.Namespace, bootstrap: str) -> dict[str, list[tuple[float, float, float]]]:
    kafka = KafkaConfig(bootstrap_servers=bootstrap)
    schemes = tuple(args.schemes)
    results: dict[str, list[tuple[float, float, float]]] = {s: [] for s in schemes}
    for index in range(-1, args.rounds):  # round -1 warms the broker up and is not counted
        order = schemes[index % len(schemes) :] + schemes[: index % len(schemes)]
        for scheme in order:
            work = Workload(args, f"bench-{uuid.uuid4().hex[:8]}")
            asyncio.run(ensure_topics(kafka, work.topics()))
            batches = 3 if index < 0 else args.batches
            runs: dict[str, Callable[[], None]] = {
                "one": lambda w=work, b=batches: asyncio.run(run_one(kafka, w, b)),
                "per-partition": lambda w=work, b=batches: asyncio.run(run_per_partition(kafka, w, b)),
                "kip447": lambda w=work, b=batches: run_kip447(bootstrap, w, b),
                "per-partition-overlap": lambda w=work, b=batches: asyncio.run(
                    run_per_partition_overlap(kafka, w, b)
                ),
            }
            wall, cpu, turned_back = measure(runs[scheme], batches)
            if index >= 0:
                results[scheme].append((wall, cpu, turned_back))
                say(
                    f"round {index + 1} {scheme}: {wall:.1f} ms, {cpu:.1f} CPU-ms, {turned_back:.1f} turned back"
                )
    return results


def render(args: argparse.Namespace, results: dict[str, list[tuple[float, float, float]]]) -> str:
    base = "one" if "one" in results else next(iter(results))
    base_cpu = statistics.median(c for _, c, _ in results[base])
    chosen = "" if tuple(args.schemes) == SCHEMES else f" --schemes {' '.join(args.schemes)}"
    lines = [
        "# Commit cost per fencing scheme (bench/transaction_scheme.py)",
        "",
        f"Command: `.venv/bin/python bench/transaction_scheme.py --rounds {args.rounds} --batches {args.batches} "
        f"--partitions {args.partitions} --clean-records {args.clean_records} --changelog-records "
        f"{args.changelog_records}{chosen}`",
        "",
        f"Machine: {os.cpu_count()} cores, one local Kafka broker sharing them; 1-minute load average at the "
        f"end: {os.getloadavg()[0]:.2f}. Per batch: {args.partitions} raw partitions x ({args.clean_records} "
        f"change events of 400 B + {args.changelog_records} changelog records of 100 B) and their offsets.",
        "",
        f"| scheme | wall ms per batch (median) | CPU ms per batch (median) | CPU ms per batch, each round | "
        f"CPU vs {base} | records turned back per batch (median) |",
        "|---|---:|---:|---|---:|---:|",
    ]
    for scheme in results:
        walls = [w for w, _, _ in results[scheme]]
        cpus = [c for _, c, _ in results[scheme]]
        back = [t for _, _, t in results[scheme]]
        lines.append(
            f"| {scheme} | {statistics.median(walls):.1f} | {statistics.median(cpus):.1f} | "
            f"{', '.join(f'{c:.1f}' for c in cpus)} | {statistics.median(cpus) / base_cpu:.2f} | "
            f"{statistics.median(back):.1f} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
