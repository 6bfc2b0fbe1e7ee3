"""An event's write time is the write that made the change, on real Cassandra, agent and worker.

Each statement names its own timestamp (``USING TIMESTAMP``), so the test knows which write made each
change. The row's newest surviving cell is not that write whenever a statement removes something (a
``SET col = null``, an element removal, a range deletion that leaves a newer cell standing) or loses
to a newer cell in part (a batch whose cells are older than one the row keeps): a sink that orders by
``source.ts_ms`` or measures lag from it must see the statement's own time.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from cassandra_model.system_schema import load_schema_from_session
from cdc.verify.oracle import CleanEvent, compare, final_images, read_clean_topic, select_rows
from infra.cassandra import CassandraNode
from schemas.change_json import JsonChangeCodec
from tests.integration.agent_harness import unique_name, wait_until
from tests.integration.worker_harness import (
    WorkerProcess,
    copy_shuffled,
    group_lag,
    publish_through_agent,
    worker_config,
)

RAW_PARTITIONS = 6


def _statements(table: str, t0: int) -> list[tuple[str, str]]:
    """(what it sets up or checks, CQL); the expected events are in the test."""
    return [
        (
            "insert",
            f"INSERT INTO {table} (pk, ck, a, b, tags) VALUES (1, 1, 'a', 'b', {{'x', 'y'}}) "
            f"USING TIMESTAMP {t0}",
        ),
        (
            "set to null",
            f"UPDATE {table} USING TIMESTAMP {t0 + 10_000} SET b = null WHERE pk = 1 AND ck = 1",
        ),
        (
            "element removal",
            f"UPDATE {table} USING TIMESTAMP {t0 + 20_000} SET tags = tags - {{'x'}} WHERE pk = 1 AND ck = 1",
        ),
        (
            "rows for the range",
            f"BEGIN UNLOGGED BATCH "
            f"INSERT INTO {table} (pk, ck, a) VALUES (2, 1, 'a1') USING TIMESTAMP {t0}; "
            f"INSERT INTO {table} (pk, ck, a) VALUES (2, 2, 'a2') USING TIMESTAMP {t0}; "
            f"UPDATE {table} USING TIMESTAMP {t0 + 50_000} SET b = 'late' WHERE pk = 2 AND ck = 2; "
            "APPLY BATCH",
        ),
        # row 2 keeps its newer cell b, so it is updated, not deleted
        (
            "range delete over a row",
            f"DELETE FROM {table} USING TIMESTAMP {t0 + 30_000} WHERE pk = 2 AND ck >= 1 AND ck <= 2",
        ),
        (
            "a newer cell first",
            f"UPDATE {table} USING TIMESTAMP {t0 + 90_000} SET a = 'newest' WHERE pk = 3 AND ck = 1",
        ),
        (
            "batch at two timestamps",
            f"BEGIN UNLOGGED BATCH "
            f"UPDATE {table} USING TIMESTAMP {t0 + 60_000} SET b = 'b60' WHERE pk = 3 AND ck = 1; "
            f"UPDATE {table} USING TIMESTAMP {t0 + 70_000} SET tags = tags + {{'z'}} WHERE pk = 3 AND ck = 1; "
            "APPLY BATCH",
        ),
    ]


def _events_by_key(events: list[CleanEvent]) -> dict[tuple[int, int], list[dict[str, Any]]]:
    out: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for event in events:
        if event.value is not None:
            out.setdefault((event.key["pk"], event.key["ck"]), []).append(event.value)
    return out


def test_each_event_carries_the_time_of_the_write_that_made_it(
    cassandra_node: CassandraNode, kafka_bootstrap: str, session: Any, tmp_path: Path
) -> None:
    keyspace = unique_name("wt")
    session.execute(
        f"CREATE KEYSPACE {keyspace} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}"
    )
    table = f"{keyspace}.t"
    session.execute(
        f"CREATE TABLE {table} (pk int, ck int, a text, b text, tags set<text>, PRIMARY KEY (pk, ck)) "
        "WITH cdc = true"
    )
    t0 = (int(time.time()) - 60) * 1_000_000
    statements = _statements(table, t0)

    def write() -> int:
        for _, text in statements:
            session.execute(text)
        return len(statements)

    records, schema_topic = publish_through_agent(cassandra_node, kafka_bootstrap, tmp_path, keyspace, write)
    raw_topic, app_id, prefix = unique_name("cdc_raw"), unique_name("w"), unique_name("clean")
    copy_shuffled(kafka_bootstrap, records, raw_topic, RAW_PARTITIONS, copies=1, seed=None)
    worker = WorkerProcess(
        tmp_path,
        worker_config(
            bootstrap=kafka_bootstrap,
            raw_topic=raw_topic,
            schema_topic=schema_topic,
            raw_partitions=RAW_PARTITIONS,
            data_directory=tmp_path / "data",
            app_id=app_id,
            worker_id="w1",
            topic_prefix=prefix,
        ),
        "w1",
    )
    try:
        worker.start()
        worker.wait_healthy(90)
        wait_until(lambda: group_lag(kafka_bootstrap, app_id, raw_topic) == 0, 120, worker.log_tail)
    finally:
        worker.stop()
    events = read_clean_topic(kafka_bootstrap, f"{prefix}.{keyspace}.t", JsonChangeCodec())
    (schema,) = load_schema_from_session(session, [keyspace], with_system_schema=False).tables()
    difference = compare(select_rows(session, schema), final_images(events))
    assert difference.clean, difference.summary(3)

    by_key = _events_by_key(events)
    got = [
        (value["op"], (value["source"]["write_time_us"] - t0) // 1000, value["source"]["ts_ms"])
        for key in sorted(by_key)
        for value in by_key[key]
    ]
    expected = [
        ("c", 0, t0 // 1000),  # (1, 1): insert
        ("u", 10, (t0 + 10_000) // 1000),  # b = null: the row's newest cell is still the insert's
        ("u", 20, (t0 + 20_000) // 1000),  # tags - {'x'}
        ("c", 0, t0 // 1000),  # (2, 1)
        ("d", 30, (t0 + 30_000) // 1000),  # the range deletion removes it
        ("c", 50, (t0 + 50_000) // 1000),  # (2, 2): its newest cell is b at +50
        ("u", 30, (t0 + 30_000) // 1000),  # the range deletion takes a, b (+50) stays
        ("c", 90, (t0 + 90_000) // 1000),  # (3, 1)
        ("u", 70, (t0 + 70_000) // 1000),  # the batch's newer statement, not the row's newest cell (+90)
    ]
    assert got == expected, f"(op, write time - t0 in ms, ts_ms) per key, in order: {got}"
