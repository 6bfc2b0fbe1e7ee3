"""The pure parts of the Debezium and Cassandra-reader benchmarks: reading the Java harness's result, the
checks that decide whether a consumer's topic is complete and correct, and the alternating order of runs."""

from __future__ import annotations

import json
import sys
import uuid
from decimal import Decimal
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import agent_vs_debezium as avd
import decoder_throughput as dt

from cassandra_model.ddl_parser import load_schema_from_cql
from schemas.raw_event import encode_raw_event
from testkit.event_builder import EventBuilder, Write

DEVICES = [uuid.UUID(int=n) for n in range(1000)]


def expected(i: int) -> dict[str, object]:
    return avd.expected_values(i, DEVICES)


def test_the_java_result_is_its_last_result_line() -> None:
    out = (
        'cassandra-all 5.0.8\nRESULT {"mutations": 1}\nnoise\nRESULT {"mutations": 2, "run_seconds": [0.5]}\n'
    )
    assert dt.result_line(out) == {"mutations": 2, "run_seconds": [0.5]}
    with pytest.raises(ValueError, match="no RESULT line"):
        dt.result_line("error: no such segment\n")


def test_both_readers_read_the_same_data_only_when_every_sum_agrees() -> None:
    java = {"mutations": 3, "rows": 3, "cells": 24, "value_bytes": 99, "content_crc_sum": "18446744073709551615",
            "timestamp_sum": "7"}  # fmt: skip
    ours = {**java, "content_crc_sum": 2**64 - 1, "timestamp_sum": 7}  # Python sums are ints, Java's strings
    assert dt.sums_verdict(java, ours) == "same"
    verdict = dt.sums_verdict(java, {**ours, "cells": 23})
    assert verdict.startswith("DIFFERENT") and "cells 24 vs 23" in verdict


def test_the_java_harness_rates_are_mutations_over_each_pass() -> None:
    assert dt.java_rates({"mutations": 1000, "run_seconds": [0.5, 0.25, 1.0]}) == (2000.0, 4000.0)


def test_rounds_alternate_who_goes_first() -> None:
    names = ["agent", "debezium"]
    assert [avd.round_order(n, names)[0] for n in (1, 2, 3, 4)] == ["agent", "debezium", "agent", "debezium"]
    assert dt.round_order(2, ["cassandra", "a", "b"]) == ["b", "a", "cassandra"]


def test_the_shown_command_names_no_local_folder() -> None:
    shown = avd.shown_command(
        ["--agent-tree", "/x/tree", "--work", "/x/tree/w"], {"/x/tree": "TREE", "/x/tree/w": "WORK"}
    )
    assert shown == ".venv/bin/python bench/agent_vs_debezium.py --agent-tree TREE --work WORK"


def debezium_event(i: int, **changes: object) -> bytes:
    after = {c: {"value": v, "deletion_ts": None, "set": True} for c, v in expected(i).items()}
    after["device"]["value"] = str(expected(i)["device"])
    after["price"]["value"] = float(expected(i)["price"])  # decimal.handling.mode=double
    for column, value in changes.items():
        after[column]["value"] = value
    after["_range_start"] = None
    return json.dumps(
        {"op": "i", "after": after, "source": {"keyspace": "bench", "table": "readings"}}
    ).encode()


def test_a_debezium_event_decodes_to_the_row_written() -> None:
    i, values = avd.decode_debezium_event(debezium_event(7))
    assert i == 7
    assert all(avd.same_value(expected(7)[c], values[c]) for c in avd.COLUMNS)


def test_our_raw_event_decodes_to_the_row_written() -> None:
    catalog = load_schema_from_cql(f"{dt.TABLE_DDL} AND ID = {uuid.UUID(int=5)};")
    schema = catalog.by_name("bench", "readings")
    want = expected(12)
    write = Write(key=want["device"], clustering=(want["at"],), insert=True, ts=5,
                  values={c: want[c] for c in avd.COLUMNS[2:]})  # fmt: skip
    i, values = avd.decode_agent_event(encode_raw_event(EventBuilder(schema).event(write)))
    assert i == 12
    assert values == want


def test_values_compare_as_written() -> None:
    assert avd.same_value(Decimal("0.07"), 0.07)  # Debezium's double for a decimal
    assert not avd.same_value(Decimal("0.07"), 0.08)
    assert not avd.same_value(True, 1) and not avd.same_value(1, True)
    assert avd.same_value(Decimal("0.07"), Decimal("0.07")) and not avd.same_value("a", "b")


def test_the_row_check_passes_a_complete_correct_topic_only() -> None:
    check = avd.RowCheck(5, expected)
    for i in (4, 0, 2, 1, 3):
        check.add(avd.decode_debezium_event, debezium_event(i))
    assert check.summary()["complete_and_correct"] is True
    assert avd.check_text(check.summary()).startswith("ok: 5 rows")


def test_the_row_check_counts_what_is_missing_repeated_wrong_or_unreadable() -> None:
    check = avd.RowCheck(5, expected)
    check.add(avd.decode_debezium_event, debezium_event(0))
    check.add(avd.decode_debezium_event, debezium_event(0))  # a duplicate
    check.add(avd.decode_debezium_event, debezium_event(1, note="changed"))  # a wrong value
    check.add(avd.decode_debezium_event, b"{not json")
    check.add(avd.decode_debezium_event, debezium_event(9))  # never written (only 5 rows)
    s = check.summary()
    assert (s["records"], s["rows_present"], s["missing"]) == (5, 2, 3)
    assert (s["duplicates"], s["wrong_rows"], s["undecodable"], s["unknown_rows"]) == (1, 1, 1, 1)
    assert s["complete_and_correct"] is False
    assert any("row 1: note='changed'" in p for p in s["problems"])
    assert avd.check_text(s) == (
        "FAILED: 2 rows, 3 missing, 1 duplicates, 1 wrong rows, 1 undecodable, 1 unknown rows"
    )
