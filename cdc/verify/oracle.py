"""Cassandra as the oracle: what the clean topics and the workers' state must equal, and how each key's
history of change events must look.

Cassandra's rows come through cassandra-driver at consistency ALL and are put in the clean topics' JSON
form (``schemas.change_codec.json_value_row``), so a row read back and a row rebuilt from the commit log
compare as plain JSON values.

The topic readers take a ``KafkaConfig`` (its ``kafka.security`` applies: the secured local services), or
the bootstrap servers of a plaintext broker as text.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from cassandra import ConsistencyLevel
from cassandra.query import SimpleStatement

from cassandra_model.table_schema import TableSchema
from runtime.config import KafkaConfig
from runtime.kafka_clients import make_consumer, start_kafka_client
from runtime.kafka_topics import topic_partitions
from schemas.change_codec import ChangeCodec
from schemas.driver_rows import driver_row_image, key_text

# ---------------------------------------------------------------------------------------------------------
# Cassandra's side


def select_rows(session: Any, schema: TableSchema) -> dict[str, dict[str, Any]]:
    """``SELECT *`` at consistency ALL, keyed by primary key, in the clean topics' JSON form."""
    statement = SimpleStatement(
        f'SELECT * FROM "{schema.keyspace}"."{schema.table}"',
        consistency_level=ConsistencyLevel.ALL,
        fetch_size=2000,
    )
    return dict(driver_row_image(schema, row._asdict()) for row in session.execute(statement))


# ---------------------------------------------------------------------------------------------------------
# the clean topics' side


@dataclass(slots=True, frozen=True)
class CleanEvent:
    partition: int
    offset: int
    timestamp_ms: int
    key: dict[str, Any]
    value: dict[str, Any] | None

    @property
    def key_text(self) -> str:
        return key_text(self.key)


#: how long a read waits for the transactions open on a topic to end. A killed producer's transaction is
#: aborted by the broker once its transaction.timeout.ms has passed, at a check that runs every 10 s.
STABLE_WAIT_S = 120.0


class TopicNotStable(RuntimeError):
    """A transaction stayed open on a topic longer than a read may wait for it."""


def kafka_of(kafka: KafkaConfig | str) -> KafkaConfig:
    """``kafka`` itself, or a plaintext KafkaConfig for bootstrap servers given as text."""
    return KafkaConfig(bootstrap_servers=kafka) if isinstance(kafka, str) else kafka


async def _stable_ends(
    consumer: AIOKafkaConsumer, kafka: KafkaConfig, tps: list[TopicPartition], wait_s: float
) -> dict[TopicPartition, int]:
    """Each partition's end for ``consumer`` (read_committed), once every transaction that had written to
    it when the read began has ended.

    Until then a read_committed read stops at the open transaction's first offset (the last stable
    offset), so it would miss what other producers committed behind it. A killed worker leaves such a
    transaction, and the worker that takes over commits its events behind it."""
    latest = make_consumer(kafka, enable_auto_commit=False)  # read_uncommitted
    await start_kafka_client(latest, kafka)
    try:
        written = await latest.end_offsets(tps)
    finally:
        await latest.stop()
    deadline = time.monotonic() + wait_s
    while True:
        stable = await consumer.end_offsets(tps)
        open_on = [tp for tp in tps if stable[tp] < written[tp]]
        if not open_on:
            return stable
        if time.monotonic() >= deadline:
            where = ", ".join(
                f"{tp.partition} (stable up to {stable[tp]}, written up to {written[tp]})" for tp in open_on
            )
            raise TopicNotStable(
                f"topic {tps[0].topic}: a transaction is still open after {wait_s:.0f} s on partitions {where}; "
                "its producer neither commits nor aborts it, and the broker aborts it only after the "
                "producer's transaction.timeout.ms"
            )
        await asyncio.sleep(0.5)


async def read_topic_records(
    kafka: KafkaConfig | str, topic: str, *, stable_wait_s: float = STABLE_WAIT_S
) -> list[tuple[int, int, int, bytes, bytes | None]]:
    """(partition, offset, timestamp ms, key, value) of every committed record of ``topic``, in order:
    everything written before the call, once each transaction open then has been committed or aborted."""
    kafka = kafka_of(kafka)
    consumer = make_consumer(kafka, enable_auto_commit=False, isolation_level="read_committed")
    await start_kafka_client(consumer, kafka)
    try:
        tps = await topic_partitions(consumer, topic)
        if not tps:
            return []
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await _stable_ends(consumer, kafka, tps, stable_wait_s)
        out = []
        while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
            batch = await consumer.getmany(timeout_ms=1000, max_records=10_000)
            for tp, records in batch.items():
                out.extend((tp.partition, r.offset, r.timestamp, r.key, r.value) for r in records)
        return out
    finally:
        await consumer.stop()


def read_clean_topic(kafka: KafkaConfig | str, topic: str, codec: ChangeCodec) -> list[CleanEvent]:
    """Every committed record of a clean topic up to its current end, decoded (none if it does not exist)."""
    records = asyncio.run(read_topic_records(kafka, topic))
    return [
        CleanEvent(p, o, ts, codec.decode_key(k), None if v is None else codec.decode_value(v))
        for p, o, ts, k, v in records
    ]


def by_key(events: Iterable[CleanEvent]) -> dict[str, list[CleanEvent]]:
    """Events per key, in offset order (a key always lands in one partition)."""
    out: dict[str, list[CleanEvent]] = defaultdict(list)
    for event in sorted(events, key=lambda e: (e.partition, e.offset)):
        out[event.key_text].append(event)
    return out


def chain_problems(history: Sequence[CleanEvent]) -> list[str]:
    """What breaks "exactly one event per real change" in one key's history.

    Each change's before image must be the previous change's after image (a lost event breaks the chain
    forward, a repeated one backward), no change may leave the image as it was, a delete is followed by a
    tombstone, and ops agree with the images. Across a schema change the images are compared on the
    columns both have: a dropped column leaves the images, an added one joins them, with no row event.
    """
    problems: list[str] = []
    previous_after: dict[str, Any] | None = None
    pending_tombstone = False
    for event in history:
        where = f"key {event.key_text} at {event.partition}@{event.offset}"
        if event.value is None:
            if not pending_tombstone:
                problems.append(f"{where}: tombstone without a delete before it")
            pending_tombstone = False
            continue
        if pending_tombstone:
            problems.append(f"{where}: delete not followed by a tombstone")
            pending_tombstone = False
        before, after, op = event.value["before"], event.value["after"], event.value["op"]
        if not _same_on_common_columns(before, previous_after) and not _emptied_by_drop(
            before, after, previous_after, event.key
        ):
            problems.append(f"{where}: before {before} is not the previous after {previous_after}")
        if before == after:
            problems.append(f"{where}: op {op} changes nothing")
        expected_op = "c" if before is None else "d" if after is None else "u"
        if op != expected_op and not (op == "r" and expected_op == "c"):  # r: a bootstrap read creates
            problems.append(f"{where}: op {op} but images say {expected_op}")
        previous_after = after
        pending_tombstone = op == "d"
    return problems


def _emptied_by_drop(
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    previous_after: dict[str, Any] | None,
    key: dict[str, Any],
) -> bool:
    """A row whose only values were in a column dropped since: Cassandra stops showing it at the DROP (a
    schema change, which makes no row event), so the next change starts from no row."""
    if before is not None or previous_after is None or after is None or set(after) == set(previous_after):
        return False
    common = (set(after) & set(previous_after)) - set(key)
    return all(previous_after[name] is None for name in common)


def _same_on_common_columns(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool:
    if a is None or b is None:
        return a is b
    return all(a[name] == b[name] for name in a.keys() & b.keys())


def final_images(events: Iterable[CleanEvent]) -> dict[str, dict[str, Any]]:
    """The last after image per key; a delete or tombstone removes the key (as log compaction would)."""
    images: dict[str, dict[str, Any]] = {}
    for key, history in by_key(events).items():
        last = history[-1]
        if last.value is not None and last.value["after"] is not None:
            images[key] = last.value["after"]
    return images


# ---------------------------------------------------------------------------------------------------------
# comparing


@dataclass(slots=True)
class Difference:
    """Rows of one table that differ between Cassandra and one side of the pipeline."""

    lost: list[str] = field(default_factory=list)
    phantom: list[str] = field(default_factory=list)
    wrong: list[dict[str, Any]] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not (self.lost or self.phantom or self.wrong)

    def summary(self, limit: int = 5) -> dict[str, Any]:
        return {
            "lost": len(self.lost),
            "phantom": len(self.phantom),
            "wrong": len(self.wrong),
            "examples": {
                "lost": self.lost[:limit],
                "phantom": self.phantom[:limit],
                "wrong": self.wrong[:limit],
            },
        }


def compare(
    expected: dict[str, dict[str, Any]], got: dict[str, dict[str, Any]], columns: Iterable[str] | None = None
) -> Difference:
    """Rows by key; with ``columns`` (the table's columns now), images from before a schema change are
    compared on today's columns, as a consumer applying the latest schema reads them: a dropped column
    leaves them, an added one reads null."""
    if columns is not None:
        keep = list(columns)
        got = {k: {c: image.get(c) for c in keep} for k, image in got.items()}
    return Difference(
        lost=sorted(set(expected) - set(got)),
        phantom=sorted(set(got) - set(expected)),
        wrong=[
            {"key": k, "cassandra": expected[k], "pipeline": got[k]}
            for k in sorted(set(expected) & set(got))
            if expected[k] != got[k]
        ],
    )
