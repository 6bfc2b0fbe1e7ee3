"""One wide partition in a partition store: what a partition-wide change costs the worker's merge.

The worker's state work for one raw event (``ChangeProcessor.process``: digest, load, merge, change
events encoded as JSON, save), then the commit, on one PartitionStore (default StoreOptions) holding
one partition of ``--rows`` rows of ``bench.wide (pk bigint, ck int, s text static, v1 int, v2 text)``.
No Kafka: change records are counted and dropped whenever the batch loop would send them into its open
transaction (every SEND_EARLY_RECORDS records), and at the commit. Runs, in this order, each event in
a transaction of its own:

  fill              --rows INSERTs of one row each, in transactions of 5,000 (the partition grows)
  row update        an UPDATE of one row (the sparse path: header and one row read)
  static write      UPDATE ... SET s = ... : every row's image changes, so every row gets an event
  partition delete  DELETE FROM ... WHERE pk = ...: every row disappears, every row gets an event
  purge             gc_grace_seconds later: the expiry passes, a second apart, that rewrite the rows the
                    deletion covers (StoreOptions.shadow_rows_per_transaction per pass) and then purge it

For each: the seconds, the transactions, the rows read, the change events and their bytes, the records
of the transactions' changelog, and the process's peak RSS during the run (the kernel's high-water
mark, reset before each run). The issue asks that a 1M-row partition work without being loaded into
memory: the peak RSS of the last three runs shows whether it is.

    .venv/bin/python bench/wide_partition.py [--rows 1000000] [--out bench/wide_partition.md]
"""

from __future__ import annotations

import argparse
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from app.batch_loop import SEND_EARLY_RECORDS  # noqa: E402
from app.change_processor import ChangeProcessor, CleanRecord  # noqa: E402
from app.worker_stats import WorkerStats  # noqa: E402
from bench.state_store import cell, rss_mb  # noqa: E402
from cassandra_model.ddl_parser import load_schema_from_cql  # noqa: E402
from cassandra_model.table_schema import TableSchema  # noqa: E402
from schemas.change_json import JsonChangeCodec  # noqa: E402
from state.store.partition_store import PartitionStore, StoreOptions  # noqa: E402
from state.store.transaction import StateTransaction  # noqa: E402

DDL = """CREATE TABLE bench.wide (pk bigint, ck int, s text static, v1 int, v2 text, PRIMARY KEY (pk, ck))
    WITH ID = 5eb1a3c4-0000-4000-8000-000000000002"""
PARTITION_KEY = (7).to_bytes(8, "big")
NOW_MS = 1_700_000_000_000
BASE_US = 1_600_000_000_000_000
FILL_BATCH = 5000


def event(n: int, **parts: Any) -> dict[str, Any]:
    """A raw event of the partition (decoded, as the worker holds it) with a digest of its own."""
    return {
        "partition_key": PARTITION_KEY,
        "digest": n.to_bytes(16, "big"),
        "is_counter": False,
        "partition_deletion": None,
        "static_row": None,
        "range_tombstones": [],
        "rows": [],
        "source": {"node": "127.0.0.1", "segment_id": 1, "entry_offset": n},
        **parts,
    }


def row(ck: int, cells: list[dict[str, Any]], liveness_us: int | None) -> dict[str, Any]:
    return {
        "clustering": [ck.to_bytes(4, "big")],
        "liveness": None
        if liveness_us is None
        else {"timestamp": liveness_us, "ttl": 0, "local_expiration_time": None},
        "deletion": None,
        "complex_deletions": [],
        "cells": cells,
    }


def insert(ck: int) -> dict[str, Any]:
    ts = BASE_US + ck
    return event(
        ck,
        rows=[
            row(ck, [cell("v1", ck.to_bytes(4, "big"), ts), cell("v2", f"value {ck:010d}".encode(), ts)], ts)
        ],
    )


@dataclass(slots=True)
class Run:
    name: str
    events: int = 0
    transactions: int = 0
    seconds: float = 0.0
    commit_seconds: float = 0.0
    rows_read: int = 0
    changes: int = 0
    change_bytes: int = 0
    changelog_records: int = 0
    rss_before_mb: float = 0.0
    peak_rss_mb: float = 0.0


def reset_peak_rss() -> bool:
    """Reset the kernel's RSS high-water mark of this process (Linux: clear_refs 5)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


class Bench:
    def __init__(self, store: PartitionStore, schema: TableSchema) -> None:
        self.store = store
        self.schema = schema
        self.processor = ChangeProcessor(
            cluster="bench", topic_prefix="bench", codec=JsonChangeCodec(), stats=WorkerStats()
        )
        self.offset = 0

    def run(self, name: str, make: Callable[[int], dict[str, Any]], count: int, per_transaction: int) -> Run:
        """Events ``make(0) .. make(count - 1)``, made per transaction (so the input never piles up)."""
        run = Run(name, rss_before_mb=rss_mb()[0])
        reset_peak_rss()
        for start in range(0, count, per_transaction):
            events = [make(i) for i in range(start, min(count, start + per_transaction))]

            def merge(
                txn: StateTransaction, out: list[CleanRecord], events: list[dict[str, Any]] = events
            ) -> None:
                for raw in events:
                    self.drive(self.processor.process(txn, raw, self.schema, NOW_MS, out), out, run)

            self.transaction(run, merge, len(events))
        run.peak_rss_mb = rss_mb()[1]
        return run

    def purge(self, name: str, at_ms: int) -> Run:
        """Expiry passes a second apart from ``at_ms`` until the partition deletion is purged."""
        run = Run(name, rss_before_mb=rss_mb()[0])
        reset_peak_rss()
        schemas = {self.schema.table_id: self.schema}
        while self.store.read_row(self.schema.table_id, PARTITION_KEY, b"").partition_deletion is not None:
            now_ms = at_ms + 1000 * run.transactions

            def expire(txn: StateTransaction, out: list[CleanRecord], now_ms: int = now_ms) -> None:
                self.drive(self.processor.expire(txn, schemas, now_ms, out), out, run)

            self.transaction(run, expire, 0)
        run.peak_rss_mb = rss_mb()[1]
        return run

    def transaction(
        self, run: Run, work: Callable[[StateTransaction, list[CleanRecord]], None], events: int
    ) -> None:
        out: list[CleanRecord] = []
        began = time.perf_counter()
        txn = self.store.transaction()
        work(txn, out)
        self.sent(out, run)
        committing = time.perf_counter()
        records = len(txn.changelog())
        run.rows_read += txn.reads
        self.offset += max(events, 1)
        txn.commit(self.offset, self.offset + records)
        ended = time.perf_counter()
        run.seconds += ended - began
        run.commit_seconds += ended - committing
        run.events += events
        run.transactions += 1
        run.changelog_records += records

    def drive(self, steps: Generator[None, None, object], out: list[CleanRecord], run: Run) -> None:
        """What BatchLoop._drive does, with the records counted instead of sent."""
        for _ in steps:
            if len(out) >= SEND_EARLY_RECORDS:
                self.sent(out, run)

    @staticmethod
    def sent(out: list[CleanRecord], run: Run) -> None:
        run.changes += sum(1 for r in out if r.value is not None)
        run.change_bytes += sum(len(r.key) + len(r.value or b"") for r in out)
        out.clear()


def report(args: argparse.Namespace, runs: list[Run]) -> str:
    lines = [
        "# Wide partition: one partition-wide change in the worker's merge",
        "",
        f"Command: `.venv/bin/python bench/wide_partition.py --rows {args.rows}`",
        "",
        f"Machine: {platform.machine()}, Python {platform.python_version()}, default StoreOptions, one "
        "partition of `bench.wide (pk bigint, ck int, s text static, v1 int, v2 text)`.",
        "",
        "| run | events | transactions | seconds | commit s | rows read | change events | event MB "
        "| changelog records | RSS before MB | peak RSS MB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in runs:
        lines.append(
            f"| {r.name} | {r.events:,} | {r.transactions:,} | {r.seconds:.1f} | {r.commit_seconds:.1f} | {r.rows_read:,} "
            f"| {r.changes:,} | {r.change_bytes / 2**20:.0f} | {r.changelog_records:,} "
            f"| {r.rss_before_mb:.0f} | {r.peak_rss_mb:.0f} |"
        )
    lines += [
        "",
        "Peak RSS is the process's high-water mark during the run, reset before it: what the run held at "
        "its most, on top of what came before.",
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows of the wide partition")
    parser.add_argument("--out", type=Path, help="write the report (Markdown) here too")
    args = parser.parse_args()
    if args.rows < 1:
        parser.error("--rows must be at least 1")
    if not reset_peak_rss():
        print("cannot reset the RSS high-water mark (/proc/self/clear_refs): peaks include earlier runs")
    schema = load_schema_from_cql(DDL).by_name("bench", "wide")
    directory = Path(tempfile.mkdtemp(prefix="wide-partition-"))
    runs: list[Run] = []
    try:
        with PartitionStore(directory / "p0", 0, StoreOptions()) as store:
            bench = Bench(store, schema)
            n = args.rows
            steps: list[tuple[str, Callable[[int], dict[str, Any]], int, int]] = [
                ("fill", insert, n, FILL_BATCH),
                ("row update", lambda _: event(n + 1, rows=[row(1, [cell("v1", b"\0\0\0\x09", BASE_US + 10**12)], None)]), 1, 1),
                ("static write", lambda _: event(n + 2, static_row={**row(0, [cell("s", b"static", BASE_US + 2 * 10**12)], None), "clustering": []}), 1, 1),
                ("partition delete", lambda _: event(n + 3, partition_deletion={"timestamp": BASE_US + 3 * 10**12, "local_deletion_time": NOW_MS // 1000}), 1, 1),
            ]  # fmt: skip
            gc_due_ms = NOW_MS + (schema.gc_grace_seconds + 1) * 1000
            for name, make, count, per_transaction in [*steps, ("purge", event, 0, 0)]:
                if name == "purge":
                    run = bench.purge(name, gc_due_ms)
                else:
                    run = bench.run(name, make, count, per_transaction)
                runs.append(run)
                print(
                    f"{name}: {run.seconds:.1f} s, {run.rows_read:,} rows read, {run.changes:,} change events, "
                    f"peak RSS {run.peak_rss_mb:.0f} MB (before {run.rss_before_mb:.0f} MB)",
                    flush=True,
                )
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    text = report(args, runs)
    print(text)
    if args.out is not None:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
