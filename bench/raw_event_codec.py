"""Raw-event encoding and decoding on one core: what an agent pays per partition update it publishes and a
worker per raw event it reads (three per change at RF=3: a head read each, a full decode for the first).

Builds POOL raw events of `bench.readings` (10 columns; 70% INSERTs of every column, 30% UPDATEs of
three) with the test suite's event builder, then times per event, best of 3 runs:
  encode      encode_raw_event (cavro), and fastavro's schemaless_writer of the same record (reference)
  decode      decode_raw_event (cavro), and fastavro's schemaless_reader (reference)
  head        peek_raw_event: keyspace, table and digest, what a replica copy costs before it is dropped
  native      where the native core is installed (`make setup`), what the worker runs instead: its
              decode_raw_event (the same dicts, checked on every event first) and raw_event_heads over
              batches of 1000 values

    .venv/bin/python bench/raw_event_codec.py [--events 100000] [--out bench/raw_event_codec.md]
"""

from __future__ import annotations

import argparse
import datetime as dt
import decimal
import io
import os
import platform
import random
import sys
import uuid
from importlib.metadata import version
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from change_codec import TABLE_DDL, rate  # noqa: E402
from fastavro import schemaless_reader, schemaless_writer  # noqa: E402

from cassandra_model.ddl_parser import load_schema_from_cql  # noqa: E402
from schemas import load_avro_schema  # noqa: E402
from schemas.raw_event import decode_raw_event, encode_raw_event, peek_raw_event  # noqa: E402
from testkit.event_builder import EventBuilder, Write  # noqa: E402

try:  # built from native/ by `make setup`
    import cdc_native
except ImportError:
    cdc_native = None

POOL = 1000


def build_events(count: int) -> list[dict[str, Any]]:
    """``count`` raw events: INSERTs of all ten columns, and (30%) UPDATEs of three of them."""
    schema = load_schema_from_cql(TABLE_DDL).by_name("bench", "readings")
    assert schema is not None
    builder = EventBuilder(schema)
    rnd = random.Random(7)
    events = []
    for i in range(count):
        device = uuid.UUID(int=rnd.getrandbits(128))
        at = dt.datetime(2024, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=i)
        if rnd.random() < 0.3:
            values: dict[str, Any] = {"value": rnd.random(), "count": i, "note": f"note {i}"}
            write = Write(device, (at,), values, ts=1_700_000_000_000_000 + i)
        else:
            values = {"kind": "temperature", "value": rnd.random(), "count": i, "total": i * 1000, "ok": True,
                      "note": f"sensor {i} in hall B", "price": decimal.Decimal(f"{i}.25"), "tags": "a,b,c"}  # fmt: skip
            write = Write(device, (at,), values, ts=1_700_000_000_000_000 + i, insert=True)
        events.append(builder.event(write))
    return events


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    events = args.events

    records = build_events(POOL)
    encoded = [encode_raw_event(r) for r in records]
    schema = load_avro_schema("raw_mutation")
    for record, data in zip(records, encoded, strict=True):  # the reference agrees, byte for byte
        out = io.BytesIO()
        schemaless_writer(out, schema, record)
        assert out.getvalue() == data
        assert schemaless_reader(io.BytesIO(data), schema, None) == decode_raw_event(data)

    def encode(n: int) -> None:
        for i in range(n):
            encode_raw_event(records[i % POOL])

    def encode_reference(n: int) -> None:
        for i in range(n):
            schemaless_writer(io.BytesIO(), schema, records[i % POOL])

    def decode(n: int) -> None:
        for i in range(n):
            decode_raw_event(encoded[i % POOL])

    def decode_reference(n: int) -> None:
        for i in range(n):
            schemaless_reader(io.BytesIO(encoded[i % POOL]), schema, None)

    def head(n: int) -> None:
        for i in range(n):
            peek_raw_event(encoded[i % POOL])

    native_rows: list[tuple[str, float]] = []
    if cdc_native is not None:
        assert all(cdc_native.decode_raw_event(data) == decode_raw_event(data) for data in encoded)

        def decode_native(n: int) -> None:
            for i in range(n):
                cdc_native.decode_raw_event(encoded[i % POOL])

        def heads_native(n: int) -> None:
            for _ in range(n // POOL):
                cdc_native.raw_event_heads(encoded)

        native_rows = [
            ("decode_raw_event (native core)", rate(decode_native, events)),
            ("raw_event_heads (native core, head only)", rate(heads_native, events)),
        ]

    rows = [
        ("encode_raw_event (cavro)", rate(encode, events)),
        ("fastavro schemaless_writer (reference)", rate(encode_reference, events)),
        ("decode_raw_event (cavro)", rate(decode, events)),
        ("fastavro schemaless_reader (reference)", rate(decode_reference, events)),
        ("peek_raw_event (head only)", rate(head, events)),
        *native_rows,
    ]
    by_name = dict(rows)
    heads = 3 / by_name["peek_raw_event (head only)"]
    per_change = heads + 1 / by_name["decode_raw_event (cavro)"]
    per_change_ref = heads + 1 / by_name["fastavro schemaless_reader (reference)"]
    lines = [
        "# Raw-event encoding and decoding (one core)",
        "",
        f"Command: `.venv/bin/python bench/raw_event_codec.py --events {events}"
        + (f" --out {args.out}`" if args.out else "`"),
        "",
        f"Table `bench.readings` (10 columns); {POOL} distinct raw events, 70% INSERTs of every column and 30% "
        f"UPDATEs of three, {sum(map(len, encoded)) / POOL:.0f} bytes each on average. Best of 3 runs of "
        f"{events:,} events, measured {dt.date.today().isoformat()} with Python {platform.python_version()}, "
        f"cavro {version('cavro')}, fastavro {version('fastavro')} on {platform.machine()} ({os.cpu_count()} "
        f"cores, load average {os.getloadavg()[0]:.1f} at the end). Both libraries write the same bytes "
        "and read back the same records (checked on every event first).",
        "",
        "| path | events/s | µs/event |",
        "|---|---:|---:|",
        *(f"| {name} | {r:,.0f} | {1e6 / r:.1f} |" for name, r in rows),
        "",
        f"Reading: a worker at three copies per change reads three heads and decodes one event per change: "
        f"{per_change * 1e6:.0f} µs per change with cavro, {per_change_ref * 1e6:.0f} µs with fastavro's "
        "reader"
        + (
            f"; with the native core's heads and decode, "
            f"{(3 / by_name[native_rows[1][0]] + 1 / by_name[native_rows[0][0]]) * 1e6:.0f} µs."
            if native_rows
            else "."
        ),
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
