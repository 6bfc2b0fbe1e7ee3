"""`/health` of a worker: where it is in its life, and what keeps it from being `ok`.

- `starting` (HTTP 200): topics, schemas and producers are being prepared, the raw consumer not started;
- `ok` (200): merging, Kafka answers and takes its commits, and its lag is known;
- `degraded` (200): running, but Kafka does not answer or does not take its commits (each retried: a
  batch for `worker.outage_timeout_s`, then the worker stops), or its lag is unknown (it owns no raw
  partition: starting, rebalancing, or more workers than raw partitions; a partition just assigned or
  being restored). `problems` says which, one sentence each;
- `failed` (503): the worker stops (`error` says why).

A monitor that waits for `ok` (or for lag 0) therefore never takes a worker that cannot know for one that
is caught up.
"""

from __future__ import annotations

from collections.abc import Set

from app.consumer_lag import LagFigures
from app.kafka_status import KafkaStatus


def worker_health(
    *,
    lifecycle: str,
    worker_id: str,
    assigned: Set[int],
    ready: Set[int],
    tables_known: int,
    core: str,
    kafka: KafkaStatus,
    lag: LagFigures,
    failed: BaseException | None,
    now: float,
) -> tuple[int, dict[str, object]]:
    """(HTTP status, body); ``lifecycle`` is starting, ok or failed; ``core`` the per-record core that
    runs (native or python, app/worker_core.py)."""
    problems = kafka.problems(now)
    if lag.unknown is not None:
        problems.append(f"lag unknown: {lag.unknown}")
    status = "degraded" if lifecycle == "ok" and problems else lifecycle
    body: dict[str, object] = {
        "status": status,
        "worker_id": worker_id,
        "partitions_assigned": sorted(assigned),
        "partitions_ready": sorted(ready),
        "tables_known": tables_known,
        "core": core,
        "kafka_reachable": kafka.reachable,
        "kafka_committing": kafka.committing,
        "lag_known": lag.unknown is None,
        "problems": problems,
    }
    if failed is not None:
        body["error"] = str(failed)
    return (503 if status == "failed" else 200), body
