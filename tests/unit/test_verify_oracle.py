"""The history check of `cdc verify`: what counts as a lost, repeated or no-op change event."""

from __future__ import annotations

from typing import Any

from cdc.verify.oracle import CleanEvent, chain_problems, compare, final_images

KEY = {"id": 18}


def change(offset: int, before: dict[str, Any] | None, after: dict[str, Any] | None) -> CleanEvent:
    op = "c" if before is None else "d" if after is None else "u"
    return CleanEvent(0, offset, 0, KEY, {"before": before, "after": after, "op": op, "source": {}})


def test_a_clean_history_has_no_problem() -> None:
    first = {"id": 18, "v": 1}
    second = {"id": 18, "v": 2}
    history = [change(1, None, first), change(2, first, second), change(3, second, None)]
    history.append(CleanEvent(0, 4, 0, KEY, None))
    assert chain_problems(history) == []
    assert final_images(history) == {}


def test_a_lost_a_repeated_and_a_no_op_event_are_each_found() -> None:
    first, second = {"id": 18, "v": 1}, {"id": 18, "v": 2}
    assert chain_problems([change(1, None, first), change(2, None, second)])  # a delete went missing
    assert chain_problems([change(1, None, first), change(2, first, second), change(3, first, second)])
    assert chain_problems([change(1, None, first), change(2, first, first)])


def test_a_row_emptied_by_a_dropped_column_may_start_again_from_no_row() -> None:
    before_drop = {"id": 18, "note": "x", "name": None}
    after_drop = {"id": 18, "extra": 1, "name": None}
    assert chain_problems([change(1, None, before_drop), change(2, None, after_drop)]) == []
    still_had_a_value = {"id": 18, "note": "x", "name": "z"}
    assert chain_problems([change(1, None, still_had_a_value), change(2, None, after_drop)])


def test_compare_reads_old_images_with_todays_columns() -> None:
    expected = {"k": {"id": 1, "v": 2}}
    difference = compare(expected, {"k": {"id": 1, "v": 2, "dropped": "x"}}, columns=["id", "v"])
    assert difference.clean
    assert not compare(expected, {"k": {"id": 1, "v": 3}}, columns=["id", "v"]).clean
