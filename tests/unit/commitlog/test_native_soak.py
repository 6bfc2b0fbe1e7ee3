"""Fuzz soak of the native core (`make soak`): a million mutated segments through its batch reader.

Whatever the bytes, reading must end, raise nothing but the decoder's own errors (CommitLogError, from the
descriptor the Python reader checks), never crash the interpreter (a Rust panic surfaces as
pyo3's PanicException, a BaseException that fails the test), never take long on one segment and never
let memory grow. The result of a full run is recorded in bench/native_core.md.
"""

from __future__ import annotations

import os
import random
import resource
import time
from pathlib import Path

import pytest

from agents.commitlog.compression import Codec
from agents.commitlog.errors import CommitLogError
from cassandra_model.ddl_parser import load_schema_from_cql
from tests.unit.commitlog.test_mutation_decoder import SCHEMA, _sample_mutations
from tests.unit.commitlog.test_segment_reader import build_segment, segments

native_core = pytest.importorskip("agents.commitlog.native_core")
if native_core.cdc_native is None:
    pytest.skip("the native core is not installed (make setup builds it)", allow_module_level=True)

pytestmark = pytest.mark.soak

SEGMENTS = int(os.environ.get("CDC_NATIVE_SOAK_SEGMENTS", "1000000"))
SLOWEST_SEGMENT_S = 2.0
MEMORY_GROWTH_MB = 64


def _mutate(rng: random.Random, data: bytes) -> bytes:
    damaged = bytearray(data)
    for _ in range(rng.randint(1, 6)):
        kind = rng.random()
        at = rng.randrange(len(damaged))
        if kind < 0.5:
            damaged[at] ^= 1 << rng.randrange(8)
        elif kind < 0.8:
            length = rng.randint(1, 32)
            damaged[at : at + length] = rng.randbytes(min(length, len(damaged) - at))
        elif kind < 0.9:
            damaged[at : at + 4] = rng.choice([b"\x00\x00\x00\x00", b"\xff\xff\xff\xff", b"\x7f\xff\xff\xff"])
        else:
            del damaged[at:]
            if not damaged:
                damaged = bytearray(data[:1])
    return bytes(damaged)


def _targets(legacy_commitlog_dir: Path) -> list[tuple[str, bytes]]:
    rng = random.Random(7)
    samples = _sample_mutations()
    found = []
    for codec in (None, *Codec):
        for seed in range(3):
            sections = [
                [rng.choice(samples) for _ in range(rng.randint(1, 8))] for _ in range(rng.randint(1, 4))
            ]
            built = build_segment(9000 + seed, sections, codec=codec)
            found.append((built.name, built.data))
    for folder in ("4.0.11-encrypted", "3.0.29-encrypted"):
        path = segments(legacy_commitlog_dir / folder)[0]
        found.append((path.name, path.read_bytes()[:200_000]))
    return found


def _read(data: bytes, name: str, catalog: native_core.NativeCatalog, completed: bool) -> int:
    decoder = native_core.NativeSegmentDecoder(
        data, catalog.catalog, catalog, cluster="soak", node="node1", completed=completed, name=name
    )
    events = 0
    reader = decoder._reader
    current = catalog.current()
    while True:
        batch = reader.next_batch(current, 500, 0, 12)
        events += len(batch[2])
        if batch[10]:
            break
    decoder.damage  # noqa: B018 - converted like the agent does
    return events


@pytest.mark.timeout(4 * 3600)
def test_a_million_mutated_segments(legacy_commitlog_dir: Path) -> None:
    catalog = load_schema_from_cql(SCHEMA)
    native_catalog = native_core.NativeCatalog(catalog, native_core.publish_all)
    targets = _targets(legacy_commitlog_dir)
    rng = random.Random(20261127)
    started = time.monotonic()
    rss_start = 0
    refused = events = 0
    slowest = 0.0
    for i in range(SEGMENTS):
        name, data = targets[i % len(targets)] if i % 50 else targets[-1 - i // 50 % 2]
        damaged = _mutate(rng, data)
        t0 = time.perf_counter()
        try:
            events += _read(damaged, name, native_catalog, rng.random() < 0.7)
        except CommitLogError:
            refused += 1  # a header the Python reader refuses, as it would for the Python decoder
        slowest = max(slowest, time.perf_counter() - t0)
        if i == 1000:
            rss_start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    elapsed = time.monotonic() - started
    growth_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_start) / 1024
    print(f"native soak: {SEGMENTS:,} mutated segments in {elapsed:.0f} s, {events:,} events, "
          f"{refused:,} refused by the descriptor check, slowest segment {slowest * 1000:.1f} ms, "
          f"peak RSS growth {growth_mb:.1f} MB")  # fmt: skip
    assert slowest < SLOWEST_SEGMENT_S
    assert growth_mb < MEMORY_GROWTH_MB
