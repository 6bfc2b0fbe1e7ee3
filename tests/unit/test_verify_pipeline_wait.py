"""A run that never becomes idle says what was still busy: a fault campaign once failed with only "not
idle after 420 s", and the agent holding 15 records had to be found in its log."""

from __future__ import annotations

from cdc.verify.pipeline_wait import idle_report


def test_names_each_agent_with_bytes_unacknowledged_or_silent() -> None:
    report = idle_report({"agent-node3": 4994.0, "agent-node1": 0.0, "agent-node2": None}, 0, grew=False)
    assert report == (
        "agent-node2 does not answer on /metrics; agent-node3 has 4994 bytes of cdc_raw unacknowledged by Kafka"
    )


def test_names_the_workers_lag_and_a_growing_topic() -> None:
    report = idle_report({"agent-node1": 0.0}, 12, grew=True)
    assert (
        report
        == "the workers' group has 12 raw records not merged yet; the raw topic grew since the look before"
    )


def test_an_idle_pipeline_waits_only_for_ttls() -> None:
    assert idle_report({"agent-node1": 0.0}, 0, grew=False) == "idle, waiting for the last TTLs to run out"
