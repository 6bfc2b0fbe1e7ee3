"""A row's Kafka key is one byte string, whichever of the equal forms of its clustering a write used.

Clustering values that compare equal (decimal ``1.00`` and ``1.0``, a varint with a redundant sign
byte, two NaN payloads; tests/unit/cassandra_model/test_canonical_forms.py has every type) are one row in
Cassandra. The worker keeps each clustering in its type's canonical form, so the key of a row, and its
clustering columns in the images, depend only on which row it is: a compacted clean topic and the lake
hold one row, and a write that only spells the clustering differently changes nothing visible. Every
encoding is checked: JSON (its fast path from the cell bytes), Kafka Connect JSON and Avro (the
envelope path).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from cassandra_model.ddl_parser import load_schema_from_cql
from schemas.change_avro import AvroChangeCodec
from schemas.change_codec import ChangeCodec
from schemas.change_connect_json import ConnectJsonChangeCodec
from schemas.change_json import JsonChangeCodec
from schemas.driver_rows import driver_row_image, key_text
from schemas.registry_client import InMemorySchemaRegistryClient
from testkit.event_builder import NOW, DeleteRow, EventBuilder, Raw, Write
from tests.unit.app.batch_driver import BatchDriver

CATALOG = load_schema_from_cql(
    """
    CREATE TABLE ks.equal (pk int, d decimal, t frozen<tuple<varint, double>>, v int,
        PRIMARY KEY (pk, d, t)) WITH ID = 00000000-0000-0000-0000-0000000000e1;
    """
)
EQUAL = CATALOG.by_name("ks", "equal")
assert EQUAL is not None

QUIET_NAN = struct.pack(">d", float("nan"))
OTHER_NAN = bytes.fromhex("fff0000000000001")  # a negative signalling NaN: the same value to Cassandra
#: three spellings of one clustering: (d, t)
SPELLINGS: list[tuple[Any, Any]] = [
    (Decimal("1.00"), (Raw(b"\x00\x07"), Raw(QUIET_NAN))),
    (Decimal("1.0"), (7, Raw(OTHER_NAN))),
    (Decimal("1.000"), (Raw(b"\x00\x00\x07"), Raw(OTHER_NAN))),
]

CODECS: dict[str, Callable[[], ChangeCodec]] = {
    "json": JsonChangeCodec,
    "connect-json": lambda: ConnectJsonChangeCodec("clean"),
    "avro": lambda: AvroChangeCodec(InMemorySchemaRegistryClient(), "clean"),
}


def as_text(decimal: Any) -> str:
    """A decimal as the JSON encodings write it (Avro: the record of unscaled bytes and scale)."""
    if isinstance(decimal, dict):
        unscaled = int.from_bytes(decimal["unscaled"], "big", signed=True)
        return str(Decimal(unscaled).scaleb(-decimal["scale"]))
    return str(decimal)


@pytest.fixture(params=sorted(CODECS))
def worker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BatchDriver]:
    with BatchDriver(tmp_path / "p0", [EQUAL], codec=CODECS[request.param]()) as driver:
        yield driver


def test_every_event_of_a_row_carries_one_key_whichever_spelling_each_write_used(worker: BatchDriver) -> None:
    one, two, three = (EventBuilder(EQUAL, node=n) for n in ("n1", "n2", "n3"))
    (d1, t1), (d2, t2), (d3, t3) = SPELLINGS
    records = [
        *worker.batch(NOW, one.event(Write(1, (d1, t1), {"v": 1}, ts=10, insert=True))),
        *worker.batch(NOW, two.event(Write(1, (d2, t2), {"v": 2}, ts=20))),  # another replica's order
        *worker.batch(NOW, three.event(DeleteRow(1, (d3, t3), ts=30))),
        *worker.batch(NOW, two.event(Write(1, (d2, t2), {"v": 3}, ts=40, insert=True))),  # the row again
    ]
    ops = [worker.codec.decode_value(r.value)["op"] for r in records if r.value is not None]
    assert ops == ["c", "u", "d", "c"]
    assert len({r.key for r in records}) == 1, "the row was emitted under several keys"
    key = worker.codec.decode_key(records[0].key)
    assert as_text(key["d"]) == "1", "the decimal's canonical form"
    for record in records:
        if record.value is not None:
            value = worker.codec.decode_value(record.value)
            image = value["after"] or value["before"]
            same = repr((image["d"], image["t"])) == repr((key["d"], key["t"]))  # repr: NaN != NaN
            assert same, "an image spells the key otherwise"


def test_a_write_that_only_spells_the_clustering_otherwise_changes_nothing(worker: BatchDriver) -> None:
    (d1, t1), (d2, t2), _ = SPELLINGS
    first = worker.batch(NOW, EventBuilder(EQUAL, node="n1").event(Write(1, (d1, t1), {"v": 1}, ts=10)))
    assert len(first) == 1
    assert worker.batch(NOW, EventBuilder(EQUAL, node="n2").event(Write(1, (d2, t2), {"v": 1}, ts=20))) == []


def test_a_row_read_from_cassandra_compares_in_the_form_the_clean_topic_holds(tmp_path: Path) -> None:
    """The verifier's and the reconcile job's view of a SELECT (``driver_row_image``): Cassandra shows
    the spelling it kept, the clean topic the canonical one; both compare as the canonical one."""
    (d, tup), *_ = SPELLINGS
    with BatchDriver(tmp_path / "p0", [EQUAL]) as worker:
        [record] = worker.batch(
            NOW, EventBuilder(EQUAL).event(Write(1, (d, tup), {"v": 1}, ts=10, insert=True))
        )
    selected = {"pk": 1, "d": Decimal("1.00"), "t": (7, float("nan")), "v": 1}  # as cassandra-driver gives it
    key, image = driver_row_image(EQUAL, selected)
    assert key == key_text(json.loads(record.key))
    assert json.dumps(image) == json.dumps(json.loads(record.value or b"")["after"])
