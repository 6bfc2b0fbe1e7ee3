"""Heartbeat records in Debezium's convention, so a consumer can tell an idle table from a stalled pipeline.

With `worker.heartbeat_interval_ms` above 0, every worker writes one record to
`__debezium-heartbeat.<clean_topic_prefix>` at that interval (Debezium's `heartbeat.interval.ms` and
topic name), in a Kafka transaction of its own: right after a batch's transactions committed when one
is due then, or alone while no raw event arrives. It describes what is committed when it is made, so it
never says more than what read_committed consumers can see. Its producer is the worker's own
(transactional id `<app_id>-heartbeat-<worker_id>`), not one of the raw partitions'
(app/partition_producers.py): a heartbeat carries no state, so a failed one is simply tried again.
A worker whose batch cannot commit (Kafka away, a schema that never comes) writes none until it can:
heartbeats stop when the pipeline stalls, and keep coming while it is merely idle.

Key and value are JSON (whatever `worker.encoding` says), shaped as Debezium's with a JSON converter
without schemas: key `{"serverName": <clean_topic_prefix>}`, value `{"ts_ms": ...}` plus what a
consumer needs to judge how current the clean topics are:

- `ts_ms`: when the heartbeat was made, ms since the epoch (the worker's clock);
- `app_id`, `worker_id`: which worker beats;
- `raw_partitions`: the raw-topic partitions it owns, which this heartbeat speaks for;
- `offsets`: per raw partition (as a string), the next raw offset committed with this heartbeat;
- `records_behind`: raw records on those partitions not merged yet (null while not known);
- `ms_behind`: how stale the worker's clean events are; 0 when nothing waits (app/consumer_lag.py);
- `source_ts_ms`: the newest Cassandra write time, ms, of the raw events the worker merged and committed
  since it started (null: none yet): Debezium's `source.ts_ms` of the newest change it could have emitted.

Several workers: each beats for its own partitions, at its own interval, in its own transactions; all
use the one key (Debezium's), so their beats land in the same partition of the heartbeat topic, told
apart by `worker_id`. A consumer that wants the whole pipeline's liveness expects a beat from every
worker within the interval and looks at each one's `records_behind`; a worker that owns no partition
still beats, with `raw_partitions` empty.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from app.consumer_lag import LagFigures
from runtime.config import WorkerConfig
from runtime.kafka_topics import TopicSpec

#: Debezium's `topic.heartbeat.prefix` default
HEARTBEAT_TOPIC_PREFIX = "__debezium-heartbeat"
#: heartbeats matter while they are recent; a day of them is kept for a consumer that was away
HEARTBEAT_RETENTION_MS = 24 * 3600 * 1000


def heartbeat_topic(clean_topic_prefix: str) -> str:
    return f"{HEARTBEAT_TOPIC_PREFIX}.{clean_topic_prefix}"


def make_heartbeat(worker: WorkerConfig) -> Heartbeat | None:
    """The worker's heartbeats; None when `worker.heartbeat_interval_ms` is 0 (off)."""
    if worker.heartbeat_interval_ms <= 0:
        return None
    return Heartbeat(
        worker.clean_topic_prefix, worker.app_id, worker.worker_id, worker.heartbeat_interval_ms / 1000
    )


def _json(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


@dataclass(slots=True)
class Heartbeat:
    """One worker's heartbeats: when the next is due, and its record."""

    clean_topic_prefix: str
    app_id: str
    worker_id: str
    interval_s: float
    #: monotonic time of the last heartbeat committed
    last_s: float = -math.inf
    topic: str = field(init=False)
    key: bytes = field(init=False)

    def __post_init__(self) -> None:
        self.topic = heartbeat_topic(self.clean_topic_prefix)
        self.key = _json({"serverName": self.clean_topic_prefix})

    def topic_spec(self, replication_factor: int) -> TopicSpec:
        """The heartbeat topic as the worker creates it: one partition (every beat has the one key),
        deleted after HEARTBEAT_RETENTION_MS rather than compacted (compaction would keep one worker's)."""
        return TopicSpec(
            self.topic,
            1,
            replication_factor,
            {"cleanup.policy": "delete", "retention.ms": str(HEARTBEAT_RETENTION_MS)},
        )

    def due(self, now_s: float) -> bool:
        """Whether a transaction committing now should carry a heartbeat (``now_s``: monotonic)."""
        return now_s - self.last_s >= self.interval_s

    def wait_s(self, now_s: float) -> float:
        """Seconds until the next heartbeat is due (0: now)."""
        return max(0.0, self.last_s + self.interval_s - now_s)

    def committed(self, at_s: float) -> None:
        """A transaction with a heartbeat made at monotonic time ``at_s`` committed."""
        self.last_s = max(self.last_s, at_s)

    def value(self, figures: LagFigures, now_ms: int) -> bytes:
        """The heartbeat's value for the lag ``figures`` its transaction commits (see the module docstring)."""
        return _json(
            {
                "ts_ms": now_ms,
                "app_id": self.app_id,
                "worker_id": self.worker_id,
                "raw_partitions": sorted(figures.records_behind),
                "offsets": {str(p): o for p, o in sorted(figures.committed.items())},
                "records_behind": figures.total_records_behind,
                "ms_behind": figures.ms_behind,
                "source_ts_ms": figures.newest_write_ms,
            }
        )
