"""The lag figures (app/consumer_lag.py) and their Prometheus gauges, on offsets and clocks given by hand.

The high watermarks stand in for the raw consumer's last fetch responses; tests/integration/
test_worker_liveness.py checks the same figures from a running worker on real Kafka.
"""

from __future__ import annotations

import time

from prometheus_client.parser import text_string_to_metric_families

from app.consumer_lag import ConsumerLag
from app.worker_stats import WorkerStats

NOW_MS = 1_800_000_000_000
MINUTE_MS = 60_000


def lag_with(ends: dict[int, int | None]) -> ConsumerLag:
    """A tracker owning the partitions of ``ends`` (their high watermarks; None: no fetch response yet)."""
    lag = ConsumerLag()
    lag.watch(ends.get)
    lag.assign(ends)
    return lag


def test_records_behind_are_the_partition_end_minus_the_committed_offset() -> None:
    lag = lag_with({0: 10, 1: 7})
    lag.start_at({0: 4, 1: 7})

    figures = lag.observe(NOW_MS)

    assert figures.records_behind == {0: 6, 1: 0}
    assert figures.total_records_behind == 6
    assert not figures.caught_up
    assert figures.committed == {0: 4, 1: 7}


def test_a_figure_is_unknown_until_both_the_end_and_the_committed_offset_are_known() -> None:
    lag = lag_with({0: None, 1: 5})
    lag.start_at({0: 3})  # partition 1: the group's offset not read yet

    figures = lag.observe(NOW_MS)

    assert figures.records_behind == {0: None, 1: None}
    assert figures.total_records_behind is None
    assert figures.ms_behind is None
    assert not figures.caught_up


def test_a_commit_moves_the_committed_offset_and_a_late_answer_of_the_group_does_not_move_it_back() -> None:
    lag = lag_with({0: 10})
    lag.on_commit({0: 10}, None, NOW_MS)
    lag.start_at({0: 2})  # the group's offset as read before that commit

    assert lag.observe(NOW_MS).records_behind == {0: 0}


def test_an_end_older_than_the_committed_offset_counts_as_caught_up() -> None:
    lag = lag_with({0: 5})  # the last fetch response came before the records this worker committed
    lag.on_commit({0: 9}, None, NOW_MS)

    assert lag.observe(NOW_MS).records_behind == {0: 0}


def test_revoked_partitions_leave_the_figures_and_offsets_of_unowned_ones_are_ignored() -> None:
    lag = lag_with({0: 10, 1: 10, 2: 10})
    lag.revoke({1})
    lag.start_at({0: 10, 1: 0, 2: 10, 3: 0})

    figures = lag.observe(NOW_MS)

    assert figures.records_behind == {0: 0, 2: 0}
    assert lag.partitions == [0, 2]


def test_an_idle_worker_is_not_behind_however_old_its_newest_write_is() -> None:
    lag = lag_with({0: 3})
    lag.on_commit({0: 3}, (NOW_MS - 60 * MINUTE_MS) * 1000, NOW_MS - 60 * MINUTE_MS)

    figures = lag.observe(NOW_MS)

    assert figures.ms_behind == 0
    assert figures.newest_write_ms == NOW_MS - 60 * MINUTE_MS


def test_while_records_wait_ms_behind_is_now_minus_the_newest_merged_write_time() -> None:
    ends = {0: 100}
    lag = lag_with(ends)
    lag.start_at({0: 0})  # never caught up since the start
    newest_ms = NOW_MS - 5 * MINUTE_MS
    lag.on_commit({0: 50}, newest_ms * 1000 + 999, NOW_MS - MINUTE_MS)  # µs: rounded down to the ms

    figures = lag.observe(NOW_MS)

    assert figures.records_behind == {0: 50}
    assert figures.newest_write_ms == newest_ms
    assert figures.ms_behind == 5 * MINUTE_MS
    assert lag.observe(NOW_MS + 1000).ms_behind == 5 * MINUTE_MS + 1000, "it grows while records wait"


def test_a_burst_after_a_quiet_hour_counts_from_when_the_worker_was_last_caught_up() -> None:
    ends = {0: 10}
    lag = lag_with(ends)
    lag.on_commit({0: 10}, (NOW_MS - 60 * MINUTE_MS) * 1000, NOW_MS - 60 * MINUTE_MS)
    lag.observe(NOW_MS - 2000)  # a scrape: still nothing waiting
    ends[0] = 40  # the burst

    assert lag.observe(NOW_MS).ms_behind == 2000


def test_a_worker_that_owns_nothing_does_not_know_its_lag() -> None:
    """It cannot tell whether its group's input waits (after a broker came back, ~30,000 raw records
    waited while a worker without partitions said 0 behind)."""
    lag = lag_with({0: 10})
    lag.on_commit({0: 10}, None, NOW_MS - 1000)
    lag.revoke({0})

    figures = lag.observe(NOW_MS)

    assert not figures.caught_up
    assert (figures.total_records_behind, figures.ms_behind) == (None, None)
    assert figures.unknown is not None and "owns no raw partition" in figures.unknown


def test_while_kafka_does_not_answer_no_figure_is_known_and_after_it_answers_they_are_again() -> None:
    lag = lag_with({0: 10, 1: 4})
    lag.on_commit({0: 10, 1: 4}, None, NOW_MS - 1000)
    lag.blind("Kafka at k:9092 does not answer", NOW_MS - 500)

    figures = lag.observe(NOW_MS)

    assert figures.records_behind == {0: None, 1: None}
    assert (figures.total_records_behind, figures.ms_behind) == (None, None)
    assert figures.unknown == "Kafka at k:9092 does not answer"
    assert figures.committed == {0: 10, 1: 4}, "what was committed is still known"
    lag.blind(None, NOW_MS)
    again = lag.observe(NOW_MS)
    assert (again.records_behind, again.ms_behind, again.unknown) == ({0: 0, 1: 0}, 0, None)


def test_after_kafka_was_away_an_end_counts_only_from_a_fetch_response_after_its_return() -> None:
    """The ends the last fetches saw before an outage are long past once Kafka is back (the agents
    publish their backlog at once): until the consumer fetched again, those partitions are unknown."""
    ends = {0: 10, 1: 4}
    fetched = {0: NOW_MS - 90_000, 1: NOW_MS - 90_000}
    lag = ConsumerLag()
    lag.watch(ends.get, fetched.get)
    lag.assign(ends)
    lag.on_commit({0: 10, 1: 4}, None, NOW_MS - 90_000)
    assert lag.observe(NOW_MS - 60_000).records_behind == {0: 0, 1: 0}, "no outage yet: the ends count"
    lag.blind("Kafka at k:9092 does not answer", NOW_MS - 60_000)
    lag.blind(None, NOW_MS - 1_000)
    lag.blind(None, NOW_MS - 500)  # the probe answers again: still from the first answer on

    assert lag.observe(NOW_MS).records_behind == {0: None, 1: None}
    ends[0], fetched[0] = 30_710, NOW_MS - 200
    figures = lag.observe(NOW_MS)
    assert figures.records_behind == {0: 30_700, 1: None}
    assert figures.total_records_behind is None and figures.unknown is not None


def test_behind_with_nothing_merged_and_never_caught_up_has_no_ms_figure() -> None:
    lag = lag_with({0: 8})
    lag.start_at({0: 0})

    figures = lag.observe(NOW_MS)

    assert figures.records_behind == {0: 8}
    assert figures.ms_behind is None


def test_figures_of_a_pending_transaction_change_nothing() -> None:
    lag = lag_with({0: 10})
    lag.start_at({0: 0})

    pending = lag.figures(NOW_MS, offsets={0: 10}, newest_write_us=(NOW_MS - 1000) * 1000)

    assert pending.records_behind == {0: 0} and pending.ms_behind == 0
    assert pending.newest_write_ms == NOW_MS - 1000
    after = lag.observe(NOW_MS)
    assert after.records_behind == {0: 10}
    assert after.newest_write_ms is None


def samples(stats: WorkerStats) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(stats.prometheus().decode())
        for s in family.samples
    }


def test_the_stats_document_and_the_prometheus_gauges_show_the_figures() -> None:
    stats = WorkerStats()
    ends = {0: 12, 1: 4, 2: None}
    stats.lag.watch(ends.get)
    stats.lag.assign(ends)
    stats.lag.start_at({0: 2, 1: 4})
    stats.lag.on_commit({0: 5}, 1_700_000_000_123_456, 1_700_000_001_000)

    before_ms = int(time.time() * 1000)
    document = stats.document()["lag"]
    scraped = samples(stats)

    assert isinstance(document, dict)
    ms_behind = document.pop("ms_behind")
    assert document == {
        "records_behind": None,  # partition 2 is not known yet
        "records_behind_by_partition": {"0": 7, "1": 0, "2": None},
        "newest_write_ms": 1_700_000_000_123,
        "committed_offsets": {"0": 5, "1": 4},
        "unknown_reason": "raw partition(s) 2: no fetch response or committed offset yet (just assigned, or "
        "restoring)",
    }
    assert scraped[("cdc_worker_lag_known", ())] == 0
    assert ms_behind >= before_ms - 1_700_000_000_123, "partition 0 is behind: now - the newest write"
    assert scraped[("cdc_worker_lag_records", (("partition", "0"),))] == 7
    assert scraped[("cdc_worker_lag_records", (("partition", "1"),))] == 0
    assert ("cdc_worker_lag_records", (("partition", "2"),)) not in scraped
    assert scraped[("cdc_worker_lag_ms", ())] >= ms_behind
    assert scraped[("cdc_worker_newest_write_timestamp_seconds", ())] == 1_700_000_000.123


def test_figures_not_known_yet_have_no_prometheus_sample() -> None:
    stats = WorkerStats()
    stats.lag.assign({0})

    scraped = samples(stats)

    assert [name for name, _ in scraped if name.startswith("cdc_worker_lag")] == ["cdc_worker_lag_known"]
    assert scraped[("cdc_worker_lag_known", ())] == 0
    assert ("cdc_worker_newest_write_timestamp_seconds", ()) not in scraped
    assert stats.document()["lag"] == {
        "records_behind": None,
        "records_behind_by_partition": {"0": None},
        "ms_behind": None,
        "newest_write_ms": None,
        "committed_offsets": {},
        "unknown_reason": "raw partition(s) 0: no fetch response or committed offset yet (just assigned, or "
        "restoring)",
    }


def test_a_worker_without_partitions_has_no_lag_sample_and_says_its_lag_is_unknown() -> None:
    stats = WorkerStats()

    scraped = samples(stats)

    assert [name for name, _ in scraped if name.startswith("cdc_worker_lag")] == ["cdc_worker_lag_known"]
    assert scraped[("cdc_worker_lag_known", ())] == 0
    lag = stats.document()["lag"]
    assert isinstance(lag, dict)
    assert (lag["records_behind"], lag["ms_behind"]) == (None, None)
    assert "owns no raw partition" in lag["unknown_reason"]


def test_a_caught_up_worker_says_its_lag_is_known() -> None:
    stats = WorkerStats()
    stats.lag.watch({0: 3}.get)
    stats.lag.assign({0})
    stats.lag.start_at({0: 3})

    scraped = samples(stats)

    assert scraped[("cdc_worker_lag_known", ())] == 1
    assert scraped[("cdc_worker_lag_records", (("partition", "0"),))] == 0
    assert scraped[("cdc_worker_lag_ms", ())] == 0
