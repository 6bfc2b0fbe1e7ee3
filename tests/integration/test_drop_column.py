"""ALTER TABLE ... DROP on real Cassandra, agent and worker: rows that lived only by the dropped column go.

Rows made by ``UPDATE ... SET qty = ?`` on new keys live by their ``qty`` cell alone. Once ``qty`` is
dropped, Cassandra no longer returns them, and no write will ever say so: the worker must emit a delete
(with the row as it was) and a tombstone for each, so a sink forgets them. Rows that keep a row marker or
another live cell change no event. A partition whose only row went that way and that has live static
cells shows its static-only row from then on, as SELECT does.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from cassandra import ConsistencyLevel
from cassandra.query import SimpleStatement

from cassandra_model.system_schema import load_schema_from_session
from cdc.verify.oracle import by_key, chain_problems, compare, final_images, read_clean_topic, select_rows
from infra.cassandra import CassandraNode
from schemas.change_json import JsonChangeCodec
from schemas.driver_rows import key_text
from tests.integration.agent_harness import new_agent, running_agents, unique_name, wait_until
from tests.integration.worker_harness import WorkerProcess, group_lag, topic_ends, worker_config

QTY_ONLY = range(12)  # rows that live by qty alone
MARKED = range(20, 24)  # INSERTed: their row marker keeps them
NAMED = range(30, 34)  # qty and name: name keeps them


def test_rows_that_lived_only_by_a_dropped_column_are_deleted_once(
    cassandra_node: CassandraNode, kafka_bootstrap: str, session: Any, tmp_path: Path
) -> None:
    ks = unique_name("drop")
    session.execute(
        f"CREATE KEYSPACE {ks} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}"
    )
    session.execute(f"CREATE TABLE {ks}.stock (id int PRIMARY KEY, name text, qty int) WITH cdc = true")
    session.execute(
        f"CREATE TABLE {ks}.shelf (pk int, ck int, label text static, qty int, PRIMARY KEY (pk, ck)) "
        "WITH cdc = true"
    )
    statements = 0

    def execute(text: str, args: tuple[Any, ...] = ()) -> None:
        nonlocal statements
        session.execute(SimpleStatement(text, consistency_level=ConsistencyLevel.ALL), args)
        statements += 1

    with running_agents() as agents:
        agent = new_agent(
            agents,
            tmp_path,
            cdc_raw=cassandra_node.spec.cdc_raw,
            bootstrap=kafka_bootstrap,
            keyspaces=[ks],
            agent={"schema_refresh_interval_s": 1},
        )
        app_id, prefix = unique_name("drop-w"), unique_name("dropclean")
        worker = WorkerProcess(
            tmp_path,
            worker_config(
                bootstrap=kafka_bootstrap,
                raw_topic=agent.raw_topic,
                schema_topic=agent.schema_topic,
                raw_partitions=6,
                data_directory=tmp_path / "worker-data",
                app_id=app_id,
                worker_id="drop-w1",
                topic_prefix=prefix,
            ),
            "drop-w1",
        )
        agent.start()
        agent.wait_healthy()
        try:
            worker.start()
            worker.wait_healthy(90)
            for i in QTY_ONLY:
                execute(f"UPDATE {ks}.stock SET qty = %s WHERE id = %s", (i, i))
            for i in MARKED:
                execute(f"INSERT INTO {ks}.stock (id, qty) VALUES (%s, %s)", (i, i))
            for i in NAMED:
                execute(f"UPDATE {ks}.stock SET qty = %s, name = %s WHERE id = %s", (i, f"n{i}", i))
            execute(f"UPDATE {ks}.shelf SET label = 'top' WHERE pk = 1")
            execute(f"UPDATE {ks}.shelf SET qty = 5 WHERE pk = 1 AND ck = 1")  # the partition's only row
            execute(f"INSERT INTO {ks}.shelf (pk, ck, qty) VALUES (2, 1, 6)")
            wait_until(
                lambda: (
                    sum(topic_ends(kafka_bootstrap, agent.raw_topic).values()) >= statements
                    and group_lag(kafka_bootstrap, app_id, agent.raw_topic) == 0
                ),
                120,
                lambda: f"the pipeline to take {statements} writes:\n{worker.log_tail()}",
                interval_s=0.5,
            )
            session.execute(f"ALTER TABLE {ks}.stock DROP qty")
            session.execute(f"ALTER TABLE {ks}.shelf DROP qty")
            schemas = {
                t.table: t for t in load_schema_from_session(session, [ks], with_system_schema=False).tables()
            }

            def converged() -> bool:
                for table, schema in schemas.items():
                    events = read_clean_topic(kafka_bootstrap, f"{prefix}.{ks}.{table}", JsonChangeCodec())
                    columns = [c.name for c in schema.all_columns()]
                    if not compare(select_rows(session, schema), final_images(events), columns).clean:
                        return False
                return True

            wait_until(
                converged, 120, lambda: f"the clean topics to lose the dropped rows:\n{worker.log_tail()}"
            )
            status, body = worker.row(ks, "stock", {"id": 0})
        finally:
            worker.stop()

    assert status == 200 and body["rows"] == [], body
    dropped_at = {
        row.table_name: row.dropped_time.replace(tzinfo=dt.UTC)
        for row in session.execute(
            "SELECT table_name, dropped_time FROM system_schema.dropped_columns WHERE keyspace_name = %s",
            (ks,),
        )
    }
    histories = by_key(read_clean_topic(kafka_bootstrap, f"{prefix}.{ks}.stock", JsonChangeCodec()))
    problems = [p for history in histories.values() for p in chain_problems(history)]
    assert not problems, problems[:5]
    ops = {key: [e.value["op"] if e.value is not None else None for e in h] for key, h in histories.items()}
    for i in QTY_ONLY:
        history = histories[key_text({"id": i})]
        assert ops[key_text({"id": i})] == ["c", "d", None], ops  # created, deleted by the drop, tombstone
        delete = history[1].value
        assert delete is not None and delete["before"] == {"id": i, "name": None, "qty": i}, delete
        # system_schema keeps the drop's time in milliseconds
        drop_ms = int(dropped_at["stock"].timestamp() * 1000)
        assert delete["source"]["write_time_us"] // 1000 == drop_ms, delete
    kept = {key_text({"id": i}): ["c"] for i in (*MARKED, *NAMED)}
    assert {key: got for key, got in ops.items() if key in kept} == kept

    shelf = final_images(read_clean_topic(kafka_bootstrap, f"{prefix}.{ks}.shelf", JsonChangeCodec()))
    assert sorted((row["pk"], row["ck"], row["label"]) for row in shelf.values()) == [
        (1, None, "top"),
        (2, 1, None),
    ]
