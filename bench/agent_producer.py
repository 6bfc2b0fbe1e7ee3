"""The agent's Kafka producer: CPU per raw event of aiokafka and of confluent-kafka (librdkafka).

Starts a Kafka broker of its own (KRaft, a temporary home), reads the raw events of a segment folder with
the native core (the agent's batches: Avro value, key, partition), then sends them, alternating rounds, with
the same delivery guarantees the agent needs (acks=all, idempotence, order per partition, bounded bytes in
flight, every acknowledgement seen), each to a fresh topic of 12 partitions:
  aiokafka per record    `send()` per record with a done callback (the agent's Python-core path)
  aiokafka batches       `create_batch()` / `send_batch()` per partition, one callback per batch (the
                         agent's native-core path, agents/publisher.py send_batch)
  confluent-kafka        `produce()` per record with an on_delivery callback, polled (librdkafka)
CPU is this process's (all threads, librdkafka's included) from the first send to the last acknowledgement.

    .venv/bin/python bench/agent_producer.py --segments DIR [--rounds 3] [--kafka-port 19192]
        [--out bench/agent_producer.md]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from agents.commitlog.native_core import EventBatch, NativeCatalog, NativeSegmentDecoder, publish_all  # noqa: E402
from cassandra_model.ddl_parser import load_schema_from_cql  # noqa: E402
from infra.settings import InfraSettings  # noqa: E402

PARTITIONS = 12
IN_FLIGHT_BYTES = 16 * 2**20
Events = list[tuple[bytes, bytes, int]]


def load_events(folder: Path) -> Events:
    catalog = load_schema_from_cql(folder / "schema.cql")
    native = NativeCatalog(catalog, publish_all)
    events: Events = []
    for path in sorted(folder.glob("CommitLog-*.log")):
        decoder = NativeSegmentDecoder(path, catalog, native, cluster="bench", node="node1", completed=True)
        for item in decoder.batches(partitions=list(range(PARTITIONS))):
            if isinstance(item, EventBatch):
                events += zip(item.keys, item.values, item.partitions, strict=True)
    return events


def cpu() -> float:
    return time.process_time()


async def aiokafka_records(bootstrap: str, topic: str, events: Events) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, linger_ms=5,
                                max_batch_size=256 * 1024)  # fmt: skip
    await producer.start()
    acked = 0
    in_flight = 0
    room = asyncio.Event()
    done = asyncio.Event()

    def ack(size: int) -> Callable[[asyncio.Future[Any]], None]:
        def callback(f: asyncio.Future[Any]) -> None:
            nonlocal acked, in_flight
            f.result()
            acked += 1
            in_flight -= size
            room.set()
            if acked == len(events):
                done.set()

        return callback

    for key, value, _ in events:
        size = len(key) + len(value)
        while in_flight and in_flight + size > IN_FLIGHT_BYTES:
            room.clear()
            await room.wait()
        in_flight += size
        future = await producer.send(topic, value=value, key=key)
        future.add_done_callback(ack(size))
    await done.wait()
    await producer.stop()


async def aiokafka_batches(bootstrap: str, topic: str, events: Events) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, linger_ms=5,
                                max_batch_size=256 * 1024)  # fmt: skip
    await producer.start()
    partitions = list(await producer.partitions_for(topic))
    acked = 0
    in_flight = 0
    room = asyncio.Event()
    done = asyncio.Event()
    for chunk in range(0, len(events), 2000):
        groups: dict[int, list[tuple[bytes, bytes]]] = {}
        for key, value, p in events[chunk : chunk + 2000]:
            groups.setdefault(partitions[p], []).append((key, value))
        for partition, records in groups.items():
            start = 0
            while start < len(records):
                builder = producer.create_batch()
                end = start
                while end < len(records) and builder.append(
                    timestamp=None, key=records[end][0], value=records[end][1]
                ):
                    end += 1
                size = sum(len(k) + len(v) for k, v in records[start:end])
                while in_flight and in_flight + size > IN_FLIGHT_BYTES:
                    room.clear()
                    await room.wait()
                in_flight += size
                future = await producer.send_batch(builder, topic, partition=partition)

                def callback(f: asyncio.Future[Any], n: int = end - start, size: int = size) -> None:
                    nonlocal acked, in_flight
                    f.result()
                    acked += n
                    in_flight -= size
                    room.set()
                    if acked == len(events):
                        done.set()

                future.add_done_callback(callback)
                start = end
    await done.wait()
    await producer.stop()


def confluent(bootstrap: str, topic: str, events: Events) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "max.in.flight.requests.per.connection": 5, "linger.ms": 5, "batch.size": 256 * 1024,
                         "queue.buffering.max.kbytes": IN_FLIGHT_BYTES // 1024})  # fmt: skip
    acked = 0
    errors: list[Any] = []

    def delivered(err: Any, msg: Any) -> None:
        nonlocal acked
        if err is not None:
            errors.append(err)
        acked += 1

    for key, value, p in events:
        while True:
            try:
                producer.produce(topic, value, key, partition=p, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    producer.flush(60)
    if errors or acked != len(events):
        raise RuntimeError(f"confluent-kafka: {acked} acknowledged, errors {errors[:3]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--segments", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--kafka-port", type=int, default=19192)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    from infra.kafka import KafkaBroker, broker_spec

    events = load_events(args.segments)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="cdc-bench-producer-") as home:
        settings = InfraSettings.from_env(home=Path(home), kafka_port=args.kafka_port,
                                          kafka_controller_port=args.kafka_port + 1)  # fmt: skip
        broker = KafkaBroker(broker_spec(settings), settings)
        broker.start()
        bootstrap = broker.spec.bootstrap
        results: dict[str, list[tuple[float, float]]] = {}
        try:
            paths: dict[str, Callable[[str], None]] = {
                "aiokafka per record": lambda t: asyncio.run(aiokafka_records(bootstrap, t, events)),
                "aiokafka batches": lambda t: asyncio.run(aiokafka_batches(bootstrap, t, events)),
                "confluent-kafka": lambda t: confluent(bootstrap, t, events),
            }
            names = list(paths)
            for round_ in range(args.rounds):
                order = names[round_ % len(names) :] + names[: round_ % len(names)]
                for name in order:
                    topic = f"bench.producer.{round_}.{names.index(name)}"

                    async def create(topic: str = topic) -> None:
                        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
                        await admin.start()
                        try:
                            await admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
                        finally:
                            await admin.close()

                    asyncio.run(create())
                    time.sleep(1)
                    c0, w0 = cpu(), time.monotonic()
                    paths[name](topic)
                    results.setdefault(name, []).append((cpu() - c0, time.monotonic() - w0))
                    print(f"round {round_ + 1} {name}: CPU {results[name][-1][0]:.2f} s", file=sys.stderr)
        finally:
            broker.stop()
    load_after = os.getloadavg()
    n = len(events)
    lines = [
        "# The agent's Kafka producer: CPU per raw event",
        "",
        f"Command: `.venv/bin/python bench/agent_producer.py {' '.join(sys.argv[1:])}`".replace(
            str(args.segments), "DIR"
        ),
        "",
        f"{n:,} raw events of `bench.readings` (the native core's output for segments made by "
        f"`bench/decoder_throughput.py --rows 100000 --keep DIR`; {sum(len(k) + len(v) for k, v, _ in events) / 1e6:.1f} MB "
        f"of keys and values), sent to a one-broker Kafka {settings.kafka_version} on this machine, 12 partitions, "
        "acks=all, idempotent producer, 16 MiB in flight at most, every acknowledgement counted. "
        f"{args.rounds} rounds alternating the three paths. aiokafka {version('aiokafka')}, confluent-kafka "
        f"{version('confluent-kafka')}. Measured {time.strftime('%Y-%m-%d')} on a {os.cpu_count()}-core machine, "
        f"`uptime` load average before {load_before[0]:.2f}, after {load_after[0]:.2f} (other jobs share it). "
        "CPU: this process, all threads, from the first send to the last acknowledgement (the broker's not counted).",
        "",
        "| producer | CPU µs/event (median) | best | wall s (median) | events/s |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, runs in results.items():
        cpus = [c for c, _ in runs]
        walls = [w for _, w in runs]
        lines.append(f"| {name} | {1e6 * statistics.median(cpus) / n:.2f} | {1e6 * min(cpus) / n:.2f} | "
                     f"{statistics.median(walls):.2f} | {n / statistics.median(walls):,.0f} |")  # fmt: skip
    lines.append("")
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
