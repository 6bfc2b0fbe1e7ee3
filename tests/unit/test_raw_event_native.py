"""The native core's raw-event decode against schemas/raw_event.py's ``decode_raw_event``, its specification.

``cdc_native.decode_raw_event`` must return exactly the dict the Python reader returns for every event
it reads, and None (the worker then asks the Python reader, which names what is wrong) for bytes the
Python reader refuses: over the events of every merge case and of random histories (deletions, ranges,
static rows, collections, counters, TTLs), the real updates of an upstream commit log, random sources
and names, and cut, corrupted and random bytes.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from app.worker_core import AVAILABLE, event_reader
from cassandra_model.digest import update_digest
from schemas.raw_event import RawEventError, decode_raw_event, encode_raw_event, raw_event_record
from tests.unit.legacy_fixtures import decode_fixture
from tests.unit.state.merge_cases import CASES, Case, case_events
from tests.unit.state.merge_cases import table as case_table
from tests.unit.state.random_history import random_history
from tests.unit.test_raw_event import _event_bytes

pytestmark = pytest.mark.skipif(AVAILABLE != "native", reason="the native core is not installed (make setup)")

if AVAILABLE == "native":
    from cdc_native import decode_raw_event as native_decode


def same_event(data: bytes) -> dict[str, Any]:
    """The native dict of ``data``, asserted equal to the Python one (both must read it)."""
    native = native_decode(data)
    assert native is not None, f"native refused an event Python reads: {decode_raw_event(data)}"
    assert native == decode_raw_event(data)
    return native  # type: ignore[no-any-return]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_events_of_every_merge_case(case: Case) -> None:
    for event in case_events(case, case_table(case.table)):
        assert same_event(encode_raw_event(event)) == event


@pytest.mark.parametrize("seed", range(60))
def test_the_events_of_random_histories(seed: int) -> None:
    for event in random_history(seed):
        assert same_event(encode_raw_event(event)) == event


def test_the_updates_of_an_upstream_commit_log(legacy_commitlog_dir: Path) -> None:
    updates, _ = decode_fixture(legacy_commitlog_dir / "4.0.11-encrypted")
    assert updates
    for update in updates:
        record = raw_event_record(update, cluster="c", node="n1", segment_id=7, descriptor_version=7,
                                  digest=update_digest(update), published_at_ms=1)  # fmt: skip
        same_event(encode_raw_event(record))


def test_odd_bytes_are_left_to_the_python_reader() -> None:
    """Random sources and names read alike; where the bytes are cut, corrupted or random, native gives
    the Python dict or None, and None wherever Python refuses them."""
    rng = random.Random(21)
    read = 0
    for n in range(1500):
        data = _event_bytes(rng, n)
        same_event(data)
        corrupted = bytearray(data)
        for _ in range(rng.randrange(1, 6)):
            corrupted[rng.randrange(len(data))] = rng.randrange(256)
        for value in (data[: rng.randrange(len(data))], bytes(corrupted), rng.randbytes(rng.randrange(80))):
            try:
                python = decode_raw_event(value)
            except RawEventError:
                assert native_decode(value) is None, value
                continue
            native = native_decode(value)
            assert native is None or native == python
            read += native is not None
    assert read > 100  # corruptions of a value's bytes still decode, and natively
    assert native_decode(None) is None and native_decode("x") is None  # type: ignore[arg-type]


def test_trailing_bytes_and_other_formats_go_to_the_python_reader() -> None:
    data = _event_bytes(random.Random(3), 1)
    assert native_decode(data + b"\x00") is None  # Python reads the event and ignores the rest
    other_format = b"\x04" + data[1:]  # format 2
    assert native_decode(other_format) is None
    with pytest.raises(RawEventError, match="format 2 is not 1; upgrade the reader"):
        event_reader("native")(other_format)


def test_an_array_block_with_its_byte_size_is_left_to_the_python_reader() -> None:
    """Avro lets a writer give a block's item count negative, followed by its size in bytes; the Python
    reader refuses such a block (our writers never write one), so native leaves it to that reader."""
    event = case_events(CASES[0], case_table(CASES[0].table))[0]
    assert len(event["rows"]) == 1 and not event["range_tombstones"]
    empty = encode_raw_event({**event, "rows": []})
    assert empty.endswith(b"\x00\x00")
    row = encode_raw_event(event)[len(empty) - 1 : -2]  # after the rows' count of 1, before both ends
    assert empty[:-2] + b"\x02" + row + b"\x00\x00" == encode_raw_event(event)
    sized = empty[:-2] + b"\x01" + _long(len(row)) + row + b"\x00\x00"  # count -1, then the size
    assert native_decode(sized) is None
    with pytest.raises(RawEventError, match="raw event does not decode"):
        event_reader("native")(sized)


def test_the_worker_reads_with_the_native_core_and_names_what_is_wrong() -> None:
    read = event_reader("native")
    data = _event_bytes(random.Random(4), 2)
    assert read(data) == decode_raw_event(data)
    with pytest.raises(RawEventError, match=f"raw event does not decode \\({len(data) // 2} bytes\\)"):
        read(data[: len(data) // 2])


def _long(value: int) -> bytes:
    z = (value << 1) ^ (value >> 63)
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)
