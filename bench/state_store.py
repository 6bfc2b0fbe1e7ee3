"""RocksDB partition store on one core: events/s of merge_event (load, apply, save) + commit in batches,
and the process's RSS and the DB's size as the state grows.

One PartitionStore (default StoreOptions) holds one narrow table: ``pk bigint, ck int, v1 int, v2 text,
v3 bigint``, ``ROWS_PER_PARTITION`` rows per partition. The raw events are built as dicts of the raw-event
shape (what the worker gets from the Avro decoder) outside the timed sections. Runs, in this order:

  insert          ROWS events, each INSERTing a new row (every load misses; the DB grows to ROWS rows)
  update          UPDATES events, each UPDATing one cell of a random existing row (every load hits)
  update+digest   the same, with the replica-copy check first (seen_digest, remember_digest)

    .venv/bin/python bench/state_store.py [--rows 1000000] [--updates 200000] [--batch 500]
        [--cache-mb 32] [--core native|python] [--dir DIR] [--out bench/state_store.md] [--profile]

``--core`` chooses who writes and reads the stored rows' bytes, as the worker's ``worker.core`` does
(default: the native core where it is installed).

The DB lives in a temporary directory (or ``--dir``, which must not exist) and is deleted afterwards.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import platform
import pstats
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from app.worker_core import AVAILABLE, use_row_codec  # noqa: E402
from cassandra_model.ddl_parser import load_schema_from_cql  # noqa: E402
from cassandra_model.table_schema import TableSchema  # noqa: E402
from state.partition_state import prepare_event  # noqa: E402
from state.store.merge import merge_event  # noqa: E402
from state.store.partition_store import PartitionStore, StoreOptions  # noqa: E402
from state.store.transaction import StateTransaction  # noqa: E402
from state.table_layout import layout_for  # noqa: E402

DDL = """CREATE TABLE bench.narrow (pk bigint, ck int, v1 int, v2 text, v3 bigint, PRIMARY KEY (pk, ck))
    WITH ID = 5eb1a3c4-0000-4000-8000-000000000001"""
ROWS_PER_PARTITION = 100
NOW_S = 1_700_000_000
NO_DELETION_TIME = 2**31 - 1


def cell(column: str, value: bytes, ts: int) -> dict[str, Any]:
    return {
        "column": column,
        "path": None,
        "timestamp": ts,
        "ttl": 0,
        "local_deletion_time": NO_DELETION_TIME,
        "flags": 0,
        "value": value,
    }


def insert_event(i: int) -> dict[str, Any]:
    """INSERT INTO bench.narrow (pk, ck, v1, v2, v3) VALUES (...) for row number ``i``."""
    ts = 1_700_000_000_000_000 + i
    return {
        "partition_key": (i // ROWS_PER_PARTITION).to_bytes(8, "big"),
        "digest": i.to_bytes(16, "big"),
        "is_counter": False,
        "partition_deletion": None,
        "static_row": None,
        "range_tombstones": [],
        "rows": [
            {
                "clustering": [(i % ROWS_PER_PARTITION).to_bytes(4, "big")],
                "liveness": {"timestamp": ts, "ttl": 0, "local_expiration_time": None},
                "deletion": None,
                "complex_deletions": [],
                "cells": [
                    cell("v1", (i & 0x7FFFFFFF).to_bytes(4, "big"), ts),
                    cell("v2", f"reading number {i:010d}".encode(), ts),
                    cell("v3", (i * 1000).to_bytes(8, "big"), ts),
                ],
            }
        ],
    }


def update_event(row: int, n: int) -> dict[str, Any]:
    """UPDATE bench.narrow SET v1 = ... WHERE pk = ... AND ck = ... (a later write than the insert)."""
    ts = 1_800_000_000_000_000 + n
    return {
        "partition_key": (row // ROWS_PER_PARTITION).to_bytes(8, "big"),
        "digest": (2**100 + n).to_bytes(16, "big"),
        "is_counter": False,
        "partition_deletion": None,
        "static_row": None,
        "range_tombstones": [],
        "rows": [
            {
                "clustering": [(row % ROWS_PER_PARTITION).to_bytes(4, "big")],
                "liveness": None,
                "deletion": None,
                "complex_deletions": [],
                "cells": [cell("v1", (n & 0x7FFFFFFF).to_bytes(4, "big"), ts)],
            }
        ],
    }


@dataclass
class Run:
    name: str
    events: int = 0
    changes: int = 0
    seconds: float = 0.0
    commit_seconds: float = 0.0
    segments: list[tuple[int, float]] = field(default_factory=list)  # (events so far, events/s)

    @property
    def rate(self) -> float:
        return self.events / self.seconds if self.seconds else 0.0


class Bench:
    def __init__(self, store: PartitionStore, schema: TableSchema, batch: int) -> None:
        self.store = store
        self.schema = schema
        self.layout = layout_for(schema)
        self.batch = batch
        self.offset = 0

    def process(self, txn: StateTransaction, event: dict[str, Any], digests: bool) -> int:
        """The worker's per-event state work; the number of change events."""
        if digests:
            if txn.seen_digest(event["digest"]):
                return 0
            txn.remember_digest(event["digest"], NOW_S * 1000)
        prepared = prepare_event(event, self.layout)
        return sum(len(chunk) for chunk in merge_event(txn, self.schema, prepared, NOW_S))

    def run(
        self, run: Run, total: int, make: Callable[[int], dict[str, Any]], digests: bool, report_every: int
    ) -> Run:
        segment_events = 0
        segment_seconds = 0.0
        for start in range(0, total, self.batch):
            events = [make(i) for i in range(start, min(total, start + self.batch))]
            began = time.perf_counter()
            txn = self.store.transaction()
            for event in events:
                run.changes += self.process(txn, event, digests)
            self.offset += len(events)
            records = len(txn.changelog())
            committing = time.perf_counter()
            txn.commit(self.offset, self.offset + records)
            ended = time.perf_counter()
            run.commit_seconds += ended - committing
            run.seconds += ended - began
            run.events += len(events)
            segment_events += len(events)
            segment_seconds += ended - began
            if segment_events >= report_every or run.events == total:
                run.segments.append((run.events, segment_events / segment_seconds))
                segment_events, segment_seconds = 0, 0.0
        return run


def rss_mb() -> tuple[float, float]:
    """Current and peak resident set size of this process (MiB), from /proc."""
    values = {}
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(("VmRSS:", "VmHWM:")):
                values[line.split(":")[0]] = int(line.split()[1]) / 1024
    return values.get("VmRSS", 0.0), values.get("VmHWM", 0.0)


def settle(store: PartitionStore, limit_s: float = 300.0) -> float:
    """Flush, then wait until RocksDB has no compaction running or pending; the seconds waited."""
    started = time.monotonic()
    store.flush()
    while time.monotonic() - started < limit_s:
        running = store.db.property_int_value("rocksdb.num-running-compactions") or 0
        pending = store.db.property_int_value("rocksdb.compaction-pending") or 0
        if not running and not pending:
            break
        time.sleep(0.5)
    return time.monotonic() - started


def dir_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20


def profile_update(bench: Bench, rows: int, count: int) -> str:
    rng = random.Random(2)
    profiler = cProfile.Profile()
    profiler.enable()
    bench.run(Run("profile"), count, lambda n: update_event(rng.randrange(rows), 10**9 + n), False, count)
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(12)
    text = out.getvalue().replace(str(REPO) + os.sep, "")  # paths relative to the repository
    lines = [line for line in text.splitlines() if line.strip()]
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith("ncalls"))
    return "\n".join(lines[start:])


def report(args: argparse.Namespace, runs: list[Run], footprint: list[tuple[str, float, float, float]],
           stats: dict[str, int], profile: str | None, command: str, settled: float) -> str:  # fmt: skip
    out = [
        "# State store throughput and footprint (one core)",
        "",
        f"Command: `{command}`",
        f"Table `bench.narrow` (pk bigint, ck int, v1 int, v2 text, v3 bigint), {ROWS_PER_PARTITION} rows per "
        f"partition; one PartitionStore with default StoreOptions (8 MiB x 2 memtables, bloom 10 bits) and a "
        f"{args.cache_mb} MiB block cache; batches of {args.batch} events, one transaction and one commit each; "
        f"stored rows written and read by the {args.core} core. Measured "
        f"{date.today().isoformat()} on {os.cpu_count()} cores, Python {platform.python_version()}.",
        "",
        "Per event: prepare_event + merge_event (load, apply, save) (+ seen/remember_digest where named); "
        "per batch: changelog() + commit. Building the event dicts is not timed. Between the insert and the "
        f"update runs the DB was flushed and its compactions waited for ({settled:.0f} s).",
        "",
        "| run | events | changes | seconds | events/s | commit share |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for run in runs:
        share = run.commit_seconds / run.seconds if run.seconds else 0.0
        out.append(
            f"| {run.name} | {run.events:,} | {run.changes:,} | {run.seconds:.1f} | {run.rate:,.0f} | {share:.0%} |"
        )
    insert = runs[0]
    if len(insert.segments) > 1:
        out += ["", "Insert rate as the DB grows (events/s over each segment):", ""]
        out.append(" | ".join(f"{n:,}: {rate:,.0f}" for n, rate in insert.segments))
    out += [
        "",
        "Footprint (RSS of the whole benchmark process: Python, the merge core and RocksDB):",
        "",
        "| after | RSS MiB | peak RSS MiB | DB directory MiB |",
        "|---|---:|---:|---:|",
    ]
    for name, rss, peak, size in footprint:
        out.append(f"| {name} | {rss:.0f} | {peak:.0f} | {size:.0f} |")
    out += ["", "RocksDB after the runs (flushed): " + ", ".join(f"{k} {v:,}" for k, v in stats.items())]
    if profile:
        out += ["", "Profile of the update path (cProfile, top 12 by own time):", "", "```", profile, "```"]
    return "\n".join(out) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows inserted (default 1,000,000)")
    parser.add_argument("--updates", type=int, default=200_000, help="events of each update run")
    parser.add_argument("--batch", type=int, default=500, help="events per transaction (default 500)")
    parser.add_argument(
        "--cache-mb", type=int, default=32, help="block cache MiB (default 32, as StoreOptions)"
    )
    parser.add_argument("--dir", type=Path, help="DB directory (must not exist; deleted afterwards)")
    parser.add_argument("--out", type=Path, help="write the Markdown report here")
    parser.add_argument("--profile", action="store_true", help="add a cProfile of 50,000 update events")
    parser.add_argument(
        "--core",
        choices=("native", "python"),
        default=AVAILABLE,
        help=f"who writes and reads the stored rows (default here: {AVAILABLE})",
    )
    args = parser.parse_args()
    if args.core == "native" and AVAILABLE != "native":
        parser.error("--core native: the native core is not installed (make setup)")
    use_row_codec(args.core)

    schema = load_schema_from_cql(DDL).by_name("bench", "narrow")
    assert schema is not None
    base = Path(tempfile.mkdtemp(prefix="cdc-bench-state-")) if args.dir is None else args.dir
    path = base / "p0"
    command = "python " + " ".join(["bench/state_store.py", *sys.argv[1:]])
    footprint: list[tuple[str, float, float, float]] = []
    try:
        options = StoreOptions(block_cache_bytes=args.cache_mb * 2**20)
        with PartitionStore(path, 0, options) as store:
            bench = Bench(store, schema, args.batch)
            every = max(args.batch, args.rows // 10 // args.batch * args.batch)
            runs = [bench.run(Run("insert"), args.rows, insert_event, False, every)]
            print(f"insert: {runs[0].rate:,.0f} events/s", flush=True)
            settled = settle(store)
            footprint.append((f"insert of {args.rows:,} rows", *rss_mb(), dir_mb(path)))
            rng = random.Random(1)
            for name, digests in (("update", False), ("update+digest", True)):
                run = bench.run(
                    Run(name),
                    args.updates,
                    lambda n: update_event(rng.randrange(args.rows), n),
                    digests,
                    args.updates,
                )
                runs.append(run)
                print(f"{name}: {run.rate:,.0f} events/s", flush=True)
            settle(store)
            footprint.append(("updates", *rss_mb(), dir_mb(path)))
            profile = profile_update(bench, args.rows, 50_000) if args.profile else None
            stats = store.stats()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    text = report(args, runs, footprint, stats, profile, command, settled)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
