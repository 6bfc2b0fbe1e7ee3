"""The cdc_raw_full fault's reading of a node's log: Cassandra 5.0 tells the client only "failures:
UNKNOWN", so the node's "Rejecting mutation" line, for the filler's keyspace and written since the fill
began, is what says the write was refused for a full cdc_raw."""

from __future__ import annotations

from pathlib import Path

from cassandra import WriteFailure, WriteTimeout

from cdc.verify.cdc_raw_fill import refused, rejection_logged

LINE = (
    "WARN  [MutationStage-2] 2026-11-26 13:25:11,935 NoSpamLogger.java:107 - Rejecting mutation to keyspace "
    "{ks}. Free up space in /data/cdc_raw by processing CDC logs. Total CDC bytes on disk is 1065355341."
)


def test_the_rejection_is_found_only_for_the_fillers_keyspace_and_after_the_fill_began(
    tmp_path: Path,
) -> None:
    log = tmp_path / "system.log"
    log.write_text(LINE.format(ks="run_fill") + "\nINFO  earlier line\n")
    since = log.stat().st_size
    assert rejection_logged(log, 0, "run_fill") is not None
    assert rejection_logged(log, since, "run_fill") is None  # an earlier fault's line does not count
    with log.open("a") as f:
        f.write("INFO  [main] something else\n" + LINE.format(ks="other_fill") + "\n")
    assert rejection_logged(log, since, "run_fill") is None
    assert rejection_logged(log, since, "run") is None  # the keyspace name must match whole
    with log.open("a") as f:
        f.write(LINE.format(ks="run_fill") + "\n")
    found = rejection_logged(log, since, "run_fill")
    assert found is not None and found.endswith("1065355341.")


def test_only_a_refused_write_is_read_as_a_possible_rejection() -> None:
    failure = {"consistency": 1, "required_responses": 1, "received_responses": 0, "failures": 1}
    timeout = {"consistency": 1, "required_responses": 1, "received_responses": 0}
    assert refused(WriteFailure("received 0 responses and 1 failures: UNKNOWN", write_type=0, **failure))
    assert not refused(WriteTimeout("timed out", write_type=0, **timeout))
    assert not refused(OSError("connection reset"))
