"""The consumer settings with which every Spark job reads a Kafka backlog (the lake stream, the replay batch).

Spark's Kafka reader asks the broker for the partition's earliest and latest offsets after every poll (two
ListOffsets round trips), and a poll hands back at most ``max.poll.records`` records, 500 by default: a
task of 100k records then made some 600 round trips, and a warm lake batch's Kafka stage ran 2.1 s for
1.3 s of CPU (bench/lake_pipeline.md). Large fetches, and polls that return all of a fetch, leave a few.
"""

from __future__ import annotations

#: options of ``spark.read(Stream).format("kafka")``, passed to the executors' consumers
BACKLOG_READ_OPTIONS: dict[str, str] = {
    "kafka.max.partition.fetch.bytes": str(16 << 20),
    "kafka.fetch.max.bytes": str(64 << 20),
    "kafka.receive.buffer.bytes": str(4 << 20),
    "kafka.max.poll.records": "100000",
}
