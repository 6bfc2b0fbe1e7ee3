"""What the demo says at its end: a summary of the events, and where to look at the pipeline."""

from __future__ import annotations

from typing import Any

from cdc.demo.processes import DemoRun
from cdc.demo.table import KEYSPACE, TABLE
from cdc.demo.tally import Row, Tally
from cdc.demo.topics import CLEAN_TOPIC, RAW_TOPIC
from cdc.demo.workload import TTL_S


def summarize(tally: Tally, ttl_row: Row | None, took_s: float, stats: dict[str, Any]) -> None:
    events = sum(tally.ops.values())
    per_op = ", ".join(f"{op} {tally.ops[op]}" for op in ("c", "u", "d") if tally.ops[op])
    print(f"\nsummary: {events} change events in {took_s:.1f} s ({per_op}; {tally.expired} d by TTL expiry)")
    p50, top = tally.percentile(0.5), max(tally.latencies_ms, default=None)
    if p50 is not None and top is not None:
        print(f"write acknowledged -> event on the clean topic: p50 {p50:.0f} ms, max {top:.0f} ms")
    if stats:
        print(
            f"worker /stats: {stats.get('in')} raw events in, {stats.get('duplicates')} replica copies dropped, "
            f"{stats.get('noops')} no-ops, {stats.get('emitted')} change events emitted"
        )
    late_ttl = (
        ttl_row is not None and ttl_row.key not in tally.ttl_created and ttl_row.key in tally.pending_expiries
    )
    if late_ttl and (stats.get("noops") or 0) >= 1:
        print(
            f"the TTL row gave no events: its write reached the worker after its {TTL_S} s TTL (lag that high)"
        )
        tally.pending = {ts: w for ts, w in tally.pending.items() if not w.with_ttl}
        tally.pending_expiries.clear()
    if tally.waiting() or tally.unexpected:
        print(
            f"{tally.waiting()} writes have no event yet, {tally.unexpected} events match no write of this run"
        )
    else:
        print("every write gave exactly its change event")


def where_to_look(run: DemoRun, keep_running: bool) -> None:
    assert run.worker is not None
    print(f"\nwhere to look{'' if keep_running else ' (agent and worker URLs answer while they run)'}:")
    for agent in run.agents:
        url = f"http://127.0.0.1:{agent.port}"
        print(f"  {agent.name:<12} log {agent.log_path}  health {url}/health  metrics {url}/metrics")
    url = f"http://127.0.0.1:{run.worker.port}"
    print(
        f"  {'worker':<12} log {run.worker.log_path}  health {url}/health  metrics {url}/metrics  {url}/stats"
    )
    print(f'  {"REST":<12} {url}/rows/{KEYSPACE}/{TABLE}?key={{"sensor":"sensor-1","at":<epoch ms>}}')
    print(f"  {'topics':<12} clean {CLEAN_TOPIC}, raw {RAW_TOPIC} on {run.bootstrap}")
    print(f"  {'services':<12} logs in {run.settings.logs}; `.venv/bin/cdc infra status` lists them")
    if run.material is not None:
        files = run.material
        print(
            f"  {'secure mode':<12} Kafka SASL_SSL and CQL over TLS trusting {files.ca_file}; Kafka user "
            f"{files.kafka_user} (password in {files.kafka_password_file}), Cassandra role "
            f"{files.cassandra_user} (password in {files.cassandra_password_file})"
        )
    if keep_running:
        node = run.nodes[0].spec
        print(
            f"\nagent and worker keep running: write to {KEYSPACE}.{TABLE} with any CQL client "
            f"({node.address}:{node.cql_port}) and watch the events here.\n"
            "Ctrl-C stops agent and worker; Kafka and Cassandra keep running (`.venv/bin/cdc infra down` stops them)."
        )
