"""Waiting for the pipeline: caught up (nothing left to send or merge), and idle (caught up, stable, and
every TTL written has run out and its change had time to go out)."""

from __future__ import annotations

import asyncio
import time

from runtime.config import KafkaConfig
from runtime.kafka_clients import make_admin, make_consumer, start_kafka_client
from runtime.kafka_topics import topic_partitions
from runtime.service_process import ServiceProcess


class PipelineStalled(RuntimeError):
    """The pipeline did not finish the workload's changes in time: a failed run, with its report."""


def agent_lag(agent: ServiceProcess) -> float | None:
    """Durable bytes in the agent's cdc_raw not yet acknowledged by Kafka (None: it does not answer)."""
    got = agent.get("/metrics", 3.0)
    if got is None or got[0] != 200:
        return None
    for line in got[1].decode().splitlines():
        if line.startswith("cdc_agent_lag_bytes "):
            return float(line.split()[1])
    return None


async def raw_end_and_lag(kafka: KafkaConfig, topic: str, group: str) -> tuple[int, int]:
    """(sum of the raw topic's partition ends, records the group has not committed yet)."""
    consumer = make_consumer(kafka, enable_auto_commit=False)
    admin = make_admin(kafka)
    await start_kafka_client(consumer, kafka)
    await start_kafka_client(admin, kafka)
    try:
        tps = await topic_partitions(consumer, topic)
        ends = await consumer.end_offsets(tps) if tps else {}
        committed = await admin.list_consumer_group_offsets(group)
    finally:
        await consumer.stop()
        await admin.close()
    lag = 0
    for tp, end in ends.items():
        meta = committed.get(tp)
        lag += end - (meta.offset if meta is not None and meta.offset >= 0 else 0)
    return sum(ends.values()), lag


def wait_caught_up(
    kafka: KafkaConfig, raw_topic: str, group: str, agents: list[ServiceProcess], *, timeout_s: float
) -> float | None:
    """Until the agents have sent all they read and the workers have merged all of the raw topic, twice
    in a row a second apart (seconds waited), or None after ``timeout_s``."""
    began = time.monotonic()
    seen: int | None = None
    while time.monotonic() - began < timeout_s:
        end, lag = asyncio.run(raw_end_and_lag(kafka, raw_topic, group))
        if lag == 0 and all(agent_lag(a) == 0 for a in agents):
            if seen == end:
                return time.monotonic() - began
            seen = end
        else:
            seen = None
        time.sleep(1.0)
    return None


def wait_idle(
    kafka: KafkaConfig,
    raw_topic: str,
    group: str,
    agents: list[ServiceProcess],
    *,
    expiry_done_s: float,
    timeout_s: float,
) -> float:
    """Until every TTL written has expired (``expiry_done_s``, monotonic), the agents have nothing left to
    send, the raw topic stops growing and the workers' group has consumed it all: seconds waited.

    PipelineStalled past ``timeout_s`` says what was still busy at the last look, so a failed run points
    at the agent, the workers or the topic."""
    began = time.monotonic()
    deadline = began + timeout_s
    stable_since: float | None = None
    last_end: int | None = None
    busy = "nothing looked at yet"
    while True:
        now = time.monotonic()
        if now > deadline:
            raise PipelineStalled(f"the pipeline is not idle after {timeout_s:.0f} s: {busy}")
        end, lag = asyncio.run(raw_end_and_lag(kafka, raw_topic, group))
        lags = {agent.name: agent_lag(agent) for agent in agents}
        busy = idle_report(lags, lag, grew=end != last_end)
        if end != last_end or any(v != 0 for v in lags.values()) or lag:
            stable_since, last_end = None, end
        elif stable_since is None:
            stable_since = now
        if stable_since is not None and now - stable_since >= 3.0 and now >= expiry_done_s:
            return now - began
        time.sleep(0.5)


def idle_report(agent_lags: dict[str, float | None], group_lag: int, *, grew: bool) -> str:
    """What keeps the pipeline from being idle, in words (or that nothing does)."""
    parts = [
        f"{name} has {lag:.0f} bytes of cdc_raw unacknowledged by Kafka" if lag is not None
        else f"{name} does not answer on /metrics"
        for name, lag in sorted(agent_lags.items())
        if lag != 0
    ]  # fmt: skip
    if group_lag:
        parts.append(f"the workers' group has {group_lag} raw records not merged yet")
    if grew:
        parts.append("the raw topic grew since the look before")
    return "; ".join(parts) or "idle, waiting for the last TTLs to run out"
