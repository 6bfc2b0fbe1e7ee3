"""Live TTL cells: Cassandra's WRITETIME()/TTL() against the workers' per-cell write time and expiry."""

from __future__ import annotations

from typing import Any

from cdc.verify.ttl_check import compare_ttls, ttl_columns
from tests.unit.test_verify_image_audit import SCHEMAS

READ_AT = 1_000
KEY = '{"id": 7}'


def worker(**cells: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {KEY: {"values": {}, "cells": cells}}


def cell(writetime: int, expires_at: int | None) -> dict[str, Any]:
    ttl = None if expires_at is None else 30
    return {"writetime": writetime, "ttl": ttl, "expires_at": expires_at, "remaining_ttl": None}


def test_the_columns_checked_hold_one_cell() -> None:
    assert ttl_columns(SCHEMAS["kv"]) == ["extra", "loc", "name", "score"]
    assert ttl_columns(SCHEMAS["hits"]) == []  # counters carry no TTL
    assert "s" in ttl_columns(SCHEMAS["wide"]) and "vals" not in ttl_columns(SCHEMAS["wide"])


def test_matching_cells_pass() -> None:
    cassandra = {KEY: {"name": (55, 20), "score": (56, None)}}
    check = compare_ttls(
        cassandra, READ_AT, worker(name=cell(55, 1_020), score=cell(56, None)), READ_AT, ["name", "score"]
    )
    assert (check.compared, check.wrong, check.expiring) == (1, [], 0)
    within = compare_ttls(cassandra, READ_AT, worker(name=cell(55, 1_022)), READ_AT, ["name", "score"])
    assert within.compared == 1 and not within.wrong


def test_a_wrong_expiry_write_time_or_missing_ttl_is_flagged() -> None:
    cassandra = {KEY: {"name": (55, 20)}}
    for bad, problem in (
        (cell(55, 1_025), "expires at 1025 in the worker, 1020 in Cassandra"),
        (cell(54, 1_020), "write time 54 in the worker, 55 in Cassandra"),
        (cell(55, None), "no TTL in the worker"),
        (None, "the worker does not hold the live cell"),
    ):
        check = compare_ttls(cassandra, READ_AT, worker(name=bad) if bad else {}, READ_AT, ["name"])
        assert [w["problem"] for w in check.wrong] == [problem] and check.compared == 0


def test_a_ttl_only_the_worker_keeps_is_flagged() -> None:
    for cassandra in ({KEY: {"name": (55, None)}}, {}, {KEY: {}}):
        check = compare_ttls(cassandra, READ_AT, worker(name=cell(55, 1_020)), READ_AT, ["name"])
        assert [w["problem"] for w in check.wrong] == ["the worker keeps a TTL Cassandra does not show"]


def test_cells_about_to_expire_are_not_compared() -> None:
    cassandra = {KEY: {"name": (55, 2), "score": (56, 10)}}
    check = compare_ttls(cassandra, READ_AT, worker(), READ_AT + 9, ["name", "score"])
    assert (check.compared, check.expiring, check.wrong) == (0, 2, [])
    # expiring in the worker by the time it was read: not a cell Cassandra must still show
    assert not compare_ttls({}, READ_AT, worker(name=cell(55, 1_001)), READ_AT, ["name"]).wrong
