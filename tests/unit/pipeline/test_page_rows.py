"""The bootstrap scan's cut of a result page into values: the native core's ``raw_rows`` against
``_raw_rows``, its specification, on random pages and on malformed ones."""

from __future__ import annotations

import random
import struct

import pytest

from pipeline import cassandra_scan
from pipeline.cassandra_scan import _raw_rows, page_rows
from pipeline.errors import PipelineError
from tests.unit.without_native import run_snippet

native = pytest.importorskip("cdc_native", reason="the native core is not installed (make setup)")


def _page(rng: random.Random, count: int, width: int) -> tuple[bytes, list[list[bytes | None]]]:
    data = bytearray()
    rows: list[list[bytes | None]] = []
    for _ in range(count):
        row: list[bytes | None] = []
        for _ in range(width):
            kind = rng.random()
            if kind < 0.15:
                data += struct.pack(">i", -1 if rng.random() < 0.8 else -2)  # any negative length is null
                row.append(None)
                continue
            value = rng.randbytes(0 if kind < 0.25 else rng.choice((1, 8, 16, 200, 70_000)))
            data += struct.pack(">i", len(value)) + value
            row.append(value)
        rows.append(row)
    return bytes(data), rows


@pytest.mark.parametrize("seed", range(40))
def test_native_cut_equals_the_specification(seed: int) -> None:
    rng = random.Random(seed)
    count, width = rng.randint(0, 60), rng.randint(0, 30)
    data, rows = _page(rng, count, width)
    assert _raw_rows(data, count, width) == rows
    assert native.raw_rows(data, count, width) == rows


@pytest.mark.parametrize("cut", [1, 3, 4, 5, 9])
def test_a_page_cut_short_is_an_error_naming_the_value(cut: int, monkeypatch: pytest.MonkeyPatch) -> None:
    data, _ = _page(random.Random(7), 3, 2)
    short = data[: len(data) - cut]
    messages = []
    for implementation in (None, native.raw_rows):
        monkeypatch.setattr(cassandra_scan, "_native_raw_rows", implementation)
        with pytest.raises(
            PipelineError, match=r"a result page of 3 rows is malformed: value \d of 2 in row 3"
        ) as caught:
            page_rows(short, 3, 2)
        messages.append(str(caught.value))
    assert messages[0] == messages[1]


def test_without_the_native_core_the_python_cut_runs() -> None:
    got = run_snippet(
        "import json\nfrom pipeline import cassandra_scan as c\n"
        "rows = c.page_rows(b'\\x00\\x00\\x00\\x01a\\xff\\xff\\xff\\xff', 1, 2)\n"
        "print(json.dumps({'native': c._native_raw_rows is not None, 'rows': [[v and v.decode() for v in r] for r in rows]}))",
        native_importable=False,
    )
    assert got == {"native": False, "rows": [["a", None]]}
