"""Heartbeat records (app/heartbeat.py): Debezium's topic, key and value, what we add, and when one is due.

That they are written inside the worker's transactions, at the interval and also while idle, is checked on
real Kafka in tests/integration/test_worker_liveness.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.consumer_lag import ConsumerLag
from app.heartbeat import Heartbeat, heartbeat_topic, make_heartbeat
from runtime.config import ConfigError, WorkerConfig, load_config


def test_the_topic_and_key_follow_debeziums_convention() -> None:
    heartbeat = Heartbeat("shop", "cdc-worker", "w1", 5.0)

    assert heartbeat.topic == heartbeat_topic("shop") == "__debezium-heartbeat.shop"
    assert json.loads(heartbeat.key) == {"serverName": "shop"}
    spec = heartbeat.topic_spec(3)
    assert (spec.name, spec.partitions, spec.replication_factor) == ("__debezium-heartbeat.shop", 1, 3)
    assert spec.configs["cleanup.policy"] == "delete"


def test_the_value_has_debeziums_ts_ms_and_what_tells_idle_from_stalled() -> None:
    lag = ConsumerLag()
    ends = {0: 10, 1: 3}
    lag.watch(ends.get)
    lag.assign(ends)
    lag.start_at({1: 3})
    figures = lag.figures(1_700_000_060_000, offsets={0: 8}, newest_write_us=1_700_000_000_000_500)

    value = json.loads(Heartbeat("shop", "app", "w1", 1.0).value(figures, 1_700_000_060_000))

    assert value == {
        "ts_ms": 1_700_000_060_000,
        "app_id": "app",
        "worker_id": "w1",
        "raw_partitions": [0, 1],
        "offsets": {"0": 8, "1": 3},
        "records_behind": 2,
        "ms_behind": 60_000,
        "source_ts_ms": 1_700_000_000_000,
    }


def test_a_heartbeat_is_due_an_interval_after_the_last_committed_one() -> None:
    heartbeat = Heartbeat("shop", "app", "w1", 2.0)
    assert heartbeat.due(0.0) and heartbeat.wait_s(0.0) == 0.0, "the first one is due at once"

    heartbeat.committed(100.0)

    assert not heartbeat.due(101.0)
    assert heartbeat.wait_s(101.5) == pytest.approx(0.5)
    assert heartbeat.due(102.0)
    heartbeat.committed(99.0)  # a transaction made earlier that committed later does not move it back
    assert heartbeat.due(102.0)


def test_heartbeats_are_off_by_default_and_a_negative_interval_names_the_key(tmp_path: Path) -> None:
    assert make_heartbeat(WorkerConfig(data_directory=tmp_path)) is None
    beat = make_heartbeat(
        WorkerConfig(
            data_directory=tmp_path, clean_topic_prefix="p", worker_id="w", heartbeat_interval_ms=1500
        )
    )
    assert beat is not None and beat.interval_s == 1.5 and beat.topic == "__debezium-heartbeat.p"

    environ = {
        "CDC__WORKER__DATA_DIRECTORY": str(tmp_path),
        "CDC__WORKER__HEARTBEAT_INTERVAL_MS": "-1000",
    }
    with pytest.raises(
        ConfigError, match=r"worker\.heartbeat_interval_ms.*CDC__WORKER__HEARTBEAT_INTERVAL_MS"
    ):
        load_config(None, environ=environ)
