"""`cdc demo`: bring up the services, the table and the topics, play the demo, stop agent and worker."""

from __future__ import annotations

import asyncio
import logging
import time

from aiokafka.errors import KafkaError
from cassandra.cluster import NoHostAvailable

from cdc.demo.errors import DemoError
from cdc.demo.play import play
from cdc.demo.processes import AGENT_PORT, WORKER_PORT, DemoRun
from cdc.demo.table import KEYSPACE, TABLE, connect_cluster, prepare_table
from cdc.demo.topics import CLEAN_TOPIC, RAW_TOPIC, SCHEMA_TOPIC, reset_topics
from cdc.local_security import local_material
from infra.settings import InfraSettings
from infra.stack import LocalStack
from runtime.cassandra_session import explain_cassandra_error

DEFAULT_ROWS = 6
DEFAULT_ROUNDS = 4


def run_demo(
    settings: InfraSettings,
    *,
    rows: int = DEFAULT_ROWS,
    rounds: int = DEFAULT_ROUNDS,
    keep_running: bool = False,
    agent_port: int = AGENT_PORT,
    worker_port: int = WORKER_PORT,
) -> int:
    """Exit code 0 when every write gave its change event (1 otherwise; 130 on Ctrl-C mid-run).
    ``agent_port``: the agent of node N listens on it + N - 1; ``worker_port``: the worker's REST."""
    if rows < 1 or rounds < 1:
        raise ValueError("--rows and --rounds must be at least 1")
    for name, port in (("--agent-port", agent_port), ("--worker-port", worker_port)):
        if not 1 <= port <= 65535 - (2 if name == "--agent-port" else 0):
            raise ValueError(f"{name} {port} is not a TCP port (1..65535)")
    began = time.monotonic()
    logging.getLogger("runtime.kafka_topics").setLevel(logging.WARNING)  # the demo says what it does itself
    stack = LocalStack(settings)
    stack.up(nodes=1)
    nodes = [n for n in stack.known_nodes() if n.is_running()]
    run = DemoRun(
        settings, stack, nodes, local_material(stack), agent_base_port=agent_port, worker_port=worker_port
    )
    run.reset_folder()
    cluster = connect_cluster(run.cassandra)
    status = 1
    try:
        try:
            session = cluster.connect()
        except NoHostAvailable as exc:
            reason = explain_cassandra_error(exc, run.cassandra) or f"Cassandra does not answer CQL: {exc}"
            raise DemoError(f"{reason} (logs in {settings.logs})") from exc
        what = prepare_table(session, cluster)
        print(
            f"table {KEYSPACE}.{TABLE} WITH cdc = true ({what}); keyspace RF 1 over {len(run.nodes)} node(s)"
        )
        asyncio.run(reset_topics(run.kafka))
        print(f"topics {RAW_TOPIC}, {SCHEMA_TOPIC}, {CLEAN_TOPIC} recreated; configs and logs in {run.home}")
        print("Ctrl-C stops the demo at any time.")
        try:
            run.start()
            tally = asyncio.run(play(run, session, rows, rounds, keep_running))
            status = 0 if tally.waiting() == 0 and not tally.unexpected else 1
        except KafkaError as exc:
            raise DemoError(
                f"Kafka at {run.bootstrap} failed the demo: {exc!r} (logs in {settings.logs})"
            ) from exc
        except KeyboardInterrupt:
            print("\ninterrupted")
            status = 0 if keep_running else 130
        finally:
            run.stop()
    finally:
        cluster.shutdown()
    print(
        f"agent and worker stopped; the demo took {time.monotonic() - began:.0f} s. Kafka and Cassandra keep "
        "running: `.venv/bin/cdc infra status` shows them, `.venv/bin/cdc infra down` stops them.\n"
        "`.venv/bin/cdc demo --keep-running` keeps agent and worker running to show your own writes."
    )
    return status
