"""The native snapshot encoder against the Python one (its specification) on random tables' worth of rows:
every CQL cell layout (single cells, sets, lists, maps, UDT fields, frozen values), nulls, empty values,
TTLs per cell and per element, mixed and shared write times, static cells, partitions of static cells only
or of rows without cells, composite keys, and wide partitions cut at random limits; then raw rows whose write
times or bytes do not match their values, which both must refuse with the same error. And which encoder
``pipeline.core`` chooses, with and without the extension.
"""

from __future__ import annotations

import datetime as dt
import random
from typing import Any

import pytest

from pipeline.cassandra_scan import RawPage, UdtValue
from pipeline.errors import PipelineError
from pipeline.snapshot_core import AVAILABLE, snapshot_encoder
from pipeline.snapshot_encoder import SnapshotEncoder
from pipeline.snapshot_events import table_events
from tests.unit.pipeline.test_snapshot_encoder import ITEMS, WIDE, _list, built, one_page, raw_row, scanned
from tests.unit.without_native import run_snippet

native = pytest.mark.skipif(
    AVAILABLE != "native", reason="the native core (cdc_native) is not installed: make setup builds it"
)

STAMPS = [1_700_000_000_000_000, 1_700_000_000_000_001, -(2**62), 2**62, 0, -1]
TTLS = [None, None, None, 1, 60, 86_400, 0]
WORDS = ["", "a", "z", "é", "x" * 130, "mid"]


def _stamp(rng: random.Random, shared: int) -> int:
    return shared if rng.random() < 0.6 else rng.choice(STAMPS) + rng.randrange(1000)


def _multi(rng: random.Random, count: int, shared: int, fields: list[Any] | None = None) -> tuple[Any, Any]:
    """Per-element write times and TTLs (None where a UDT field is null)."""
    times = [_stamp(rng, shared) for _ in range(count)]
    ttls = [rng.choice(TTLS) for _ in range(count)] if rng.random() < 0.3 else None
    if fields is not None:
        times = [None if f is None else t for f, t in zip(fields, times, strict=True)]
        if ttls is not None:
            ttls = [None if f is None else t for f, t in zip(fields, ttls, strict=True)]
    return times, ttls


def _items_row(rng: random.Random, pk: int, ck: str | None, static: dict[str, Any]) -> dict[str, Any]:
    shared = rng.choice(STAMPS)
    values: dict[str, Any] = {"pk": pk, "ck": ck, **static["values"]}
    times: dict[str, Any] = dict(static["times"])
    ttls: dict[str, Any] = dict(static["ttls"])
    if ck is not None:
        present = rng.random()
        if rng.random() < present:
            values["v"] = rng.randrange(-(2**31), 2**31)
        if rng.random() < present:
            values["tags"] = {rng.choice(WORDS) + str(n) for n in range(rng.randrange(1, 5))}
        if rng.random() < present:
            values["attrs"] = {
                rng.choice(WORDS) + str(n): rng.randrange(-5, 5) for n in range(rng.randrange(1, 4))
            }
        if rng.random() < present:
            values["byint"] = {rng.randrange(-9, 9): rng.choice(WORDS) for _ in range(rng.randrange(1, 4))}
        if rng.random() < present:
            fields = [rng.choice([None, *WORDS]), rng.choice([None, 7, -1]), rng.choice([None, *WORDS])]
            if any(f is not None for f in fields):
                values["home"] = UdtValue(street=fields[0], zip=fields[1], note=fields[2])
                times["home"], ttls["home"] = _multi(rng, 3, shared, fields)
        if rng.random() < present:
            values["nums"] = [rng.randrange(-3, 3) for _ in range(rng.randrange(1, 5))]
        if rng.random() < present:
            values["fixed"] = UdtValue(street=rng.choice(WORDS), zip=None, note=rng.choice([None, "n"]))
        if rng.random() < present:
            values["frozen_set"] = {rng.randrange(-9, 9) for _ in range(rng.randrange(0, 3))}
        if rng.random() < present:
            values["at"] = dt.datetime(2024, 1, 1) + dt.timedelta(milliseconds=rng.randrange(10**10))
        if rng.random() < present:
            values["raw"] = bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 200])))
        for name in ("tags", "attrs", "byint", "nums"):
            if name in values:
                times[name], ttls[name] = _multi(rng, len(values[name]), shared)
        for name in ("v", "fixed", "frozen_set", "at", "raw"):
            if name in values:
                times[name], ttls[name] = _stamp(rng, shared), rng.choice(TTLS)
    return scanned(ITEMS, values, times, ttls)


def _static(rng: random.Random) -> dict[str, Any]:
    values: dict[str, Any] = {}
    times: dict[str, Any] = {}
    ttls: dict[str, Any] = {}
    shared = rng.choice(STAMPS)
    if rng.random() < 0.5:
        values["s"] = rng.choice(WORDS)
        times["s"], ttls["s"] = _stamp(rng, shared), rng.choice(TTLS)
    if rng.random() < 0.5:
        values["st"] = {rng.randrange(-9, 9) for _ in range(rng.randrange(1, 4))}
        times["st"], ttls["st"] = _multi(rng, len(values["st"]), shared)
    return {"values": values, "times": times, "ttls": ttls}


def random_items(rng: random.Random) -> list[dict[str, Any]]:
    rows = []
    for pk in range(rng.randrange(1, 12)):
        static = _static(rng)
        if static["values"] and rng.random() < 0.15:
            rows.append(_items_row(rng, pk, None, static))  # static cells only: one row of null clusterings
            continue
        for ck in sorted({rng.choice(WORDS) + str(n) for n in range(rng.randrange(1, 7))}):
            rows.append(_items_row(rng, pk, ck, static))
    return rows


def random_wide(rng: random.Random) -> list[dict[str, Any]]:
    rows = []
    for a, b in {(rng.choice(WORDS), rng.randrange(3)) for _ in range(rng.randrange(1, 5))}:
        for c in range(rng.randrange(1, 5)):
            for d in range(rng.randrange(1, 4)):
                v = rng.choice([None, *WORDS])
                rows.append(
                    scanned(
                        WIDE,
                        {"a": a, "b": b, "c": c, "d": d, "v": v},
                        {"v": _stamp(rng, 5)},
                        {"v": rng.choice(TTLS)},
                    )
                )
    return rows


def pages_of(raw: list[list[Any]], rng: random.Random) -> list[RawPage]:
    """Raw rows as result pages of 1 to 7 rows: a partition may go on over pages."""
    pages = []
    at = 0
    while at < len(raw):
        size = rng.randint(1, 7)
        pages.append(one_page(raw[at : at + size]))
        at += size
    return pages


@native
@pytest.mark.parametrize("seed", range(60))
def test_random_tables_give_the_same_events_on_both_encoders(seed: int) -> None:
    rng = random.Random(seed)
    schema, rows = (ITEMS, random_items(rng)) if seed % 3 else (WIDE, random_wide(rng))
    limits = {"max_rows": rng.choice([1, 2, 3, 500]), "max_bytes": rng.choice([1, 40, 300, 10**6])}
    raw = [raw_row(schema, r) for r in rows]
    python = built(snapshot_encoder(schema, core="python", cluster="c", published_at_ms=42, **limits), raw)
    made = built(snapshot_encoder(schema, core="native", cluster="c", published_at_ms=42, **limits), raw)
    assert made == python
    for core in ("native", "python"):  # the same rows handed over as whole result pages
        encoder = snapshot_encoder(schema, core=core, cluster="c", published_at_ms=42, **limits)
        assert list(encoder.events_of_pages(pages_of(raw, random.Random(seed)))) == python, core
    spec = list(table_events(schema, rows, cluster="c", published_at_ms=42, **limits))
    assert python == spec
    assert sum(len(events) for _, events in made) >= 1


def _outcome(core: str, raw: list[list[Any]] | list[RawPage]) -> Any:
    """The events of raw rows, or of result pages, or the PipelineError's text."""
    encoder = snapshot_encoder(ITEMS, core=core, cluster="c", published_at_ms=1)
    try:
        if raw and isinstance(raw[0], RawPage):
            return list(encoder.events_of_pages(raw))  # type: ignore[arg-type]
        return built(encoder, raw)  # type: ignore[arg-type]
    except PipelineError as exc:
        return f"PipelineError: {exc}"


@native
@pytest.mark.parametrize("seed", range(40))
def test_write_times_and_bytes_that_do_not_match_are_refused_alike(seed: int) -> None:
    rng = random.Random(seed)
    plans = SnapshotEncoder(ITEMS, cluster="c", published_at_ms=1)
    multi: list[Any] = []
    while not multi:  # a middle row with at least one collection or UDT
        rows = [_items_row(rng, 1, f"r{n}", _static(rng)) for n in range(3)]
        raw = [raw_row(ITEMS, r) for r in rows]
        multi = [c for c in plans.regular if c.layout.value != "single" and raw[1][c.value_at] is not None]
    column = rng.choice(multi)
    row = raw[1]
    how = seed % 4
    if how == 0:  # one write time too many
        row[column.time_at] = _list([(5).to_bytes(8, "big")] * (1 + len(_split(row[column.time_at]))))
        row[column.ttl_at] = None
    elif how == 1:  # a TTL list of another length than the write times
        row[column.ttl_at] = _list([(9).to_bytes(4, "big")] * (1 + len(_split(row[column.time_at]))))
    elif how == 2:  # no per-element write times (an older Cassandra)
        row[column.time_at] = None
    elif column.layout.value != "fields":  # the value cut inside its element count
        row[column.value_at] = row[column.value_at][:2]
    else:
        row[column.time_at] = _list([(5).to_bytes(8, "big")] * 2)
    python, made = _outcome("python", raw), _outcome("native", raw)
    assert isinstance(python, str) and python.startswith("PipelineError: ")
    assert made == python
    assert _outcome("native", pages_of(raw, rng)) == python  # the same rows in result pages


@native
@pytest.mark.parametrize("seed", range(20))
def test_a_page_cut_short_is_refused_alike(seed: int) -> None:
    rng = random.Random(seed)
    raw = [raw_row(ITEMS, _items_row(rng, pk, f"r{pk}", _static(rng))) for pk in range(4)]
    page = one_page(raw)
    short = RawPage(page.data[: rng.randrange(len(page.data))], page.count, page.width, page.scan_time)
    python, made = _outcome("python", [short]), _outcome("native", [short])
    assert isinstance(python, str) and "a result page of 4 rows is malformed: value" in python, python
    assert made == python


def _split(data: bytes) -> list[int]:
    return list(range(int.from_bytes(data[:4], "big", signed=True)))


_CHOICE = """
import json
from pipeline.snapshot_core import AVAILABLE, chosen_core, core_words, snapshot_encoder, NativeSnapshotEncoder
from runtime.config import CdcConfig, KafkaConfig, PipelineConfig, ConfigError
from tests.unit.pipeline.test_snapshot_encoder import ITEMS

out = {"available": AVAILABLE}
for requested in ("auto", "python", "native"):
    config = CdcConfig(kafka=KafkaConfig(), pipeline=PipelineConfig(lake_directory="/lake", core=requested))
    try:
        core = chosen_core(config)
    except ConfigError as exc:
        out[requested] = "ConfigError: " + str(exc)
        continue
    encoder = snapshot_encoder(ITEMS, core=core, cluster="c", published_at_ms=1)
    out[requested] = [core, core_words(core), isinstance(encoder, NativeSnapshotEncoder)]
print(json.dumps(out))
"""


@native
def test_pipeline_core_chooses_the_encoder_and_the_job_says_which() -> None:
    found = run_snippet(_CHOICE, native_importable=True)
    assert found["auto"] == ["native", "native core", True]
    assert found["native"] == ["native", "native core", True]
    assert found["python"] == [
        "python",
        "Python core (slower: the native core is turned off by pipeline.core)",
        False,
    ]


def test_without_the_extension_the_python_encoder_builds_and_native_is_a_config_error() -> None:
    found = run_snippet(_CHOICE, native_importable=False)
    assert found["available"] == "python"
    assert found["auto"] == ["python", "Python core (slower: the native core is not installed)", False]
    assert found["python"][2] is False
    assert "pipeline.core is native but the native core (cdc_native) is not installed" in found["native"]
