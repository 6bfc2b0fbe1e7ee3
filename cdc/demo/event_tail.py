"""The demo's consumer of the clean topic, as a downstream service would read it."""

from __future__ import annotations

import time
from typing import Any

from cdc.demo.descriptions import describe_event
from cdc.demo.display import Display
from cdc.demo.tally import Tally
from cdc.demo.topics import CLEAN_TOPIC
from cdc.demo.workload import TTL_S
from runtime.config import KafkaConfig
from runtime.kafka_clients import make_consumer, start_kafka_client
from schemas.change_json import JsonChangeCodec

SHOWN_CREATES_PER_ROUND = 8
"""Creates beyond this many per round are counted, not printed, so `--rows 500` stays readable."""


class EventTail:
    """A read_committed consumer of the clean topic: each event is matched to its write and printed."""

    def __init__(self, kafka: KafkaConfig, tally: Tally, display: Display) -> None:
        self.kafka = kafka
        self.consumer = make_consumer(
            kafka,
            CLEAN_TOPIC,
            isolation_level="read_committed",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        self.codec = JsonChangeCodec()
        self.tally = tally
        self.display = display
        self.print_all = False

    async def start(self) -> None:
        await start_kafka_client(self.consumer, self.kafka)

    async def run(self) -> None:
        while True:
            batch = await self.consumer.getmany(timeout_ms=100)
            arrived = time.time()
            for records in batch.values():
                for record in records:
                    if record.value is not None:  # None: the tombstone that follows a delete
                        key = self.codec.decode_key(record.key)
                        self.on_event(key, self.codec.decode_value(record.value), arrived)

    def on_event(self, key: dict[str, Any], value: dict[str, Any], arrived: float) -> None:
        tally = self.tally
        source = value.get("source") or {}
        row_key = (key.get("sensor"), key.get("at"))
        tally.ops[value["op"]] += 1
        write = tally.pending.pop(source.get("write_time_us") or -1, None)
        round_no, latency = None, ""
        if write is not None:
            round_no = write.round_no
            ms = max(0.0, (arrived - (write.acked or arrived)) * 1000)
            tally.latencies_ms.append(ms)
            latency = f"+{ms:.0f} ms"
            if write.with_ttl:
                tally.ttl_created.add(write.key)
        elif source.get("expired") and row_key in tally.pending_expiries:
            tally.pending_expiries.discard(row_key)
            tally.expired += 1
            latency = f"TTL {TTL_S} s"
        else:
            tally.unexpected += 1
        if value["op"] == "c" and round_no is not None and not self.print_all:
            if tally.shown[round_no] >= SHOWN_CREATES_PER_ROUND:
                tally.hidden[round_no] += 1
                return
            tally.shown[round_no] += 1
        self.display.line(f"  {describe_event(key, value):<88} {latency}".rstrip())
