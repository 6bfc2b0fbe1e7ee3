"""Commit-log decoder throughput on one core, on real segments of a typical 10-column table.

Writes ROWS rows through a one-node Cassandra of its own (127.0.2.1, a temporary home), waits until the
`_cdc.idx` offsets cover them, then times, in this single Python thread:
  framing      sync sections and entry CRCs only (SegmentScan)
  structure    framing + mutation decoding to partition updates, values left raw (the agent's path)
  digest       structure + the replica-stable MD5 of every update
  full values  structure + decoding every key, clustering and cell value to Python objects

    .venv/bin/python bench/decoder_throughput.py [--rows 100000] [--keep DIR | --segments DIR]
        [--out bench/decoder_throughput.md]

`--keep DIR` saves the generated segments and schema; `--segments DIR` reuses them (no Cassandra).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from agents.cdc_raw import list_cdc_segments  # noqa: E402
from agents.commitlog.log_reader import SegmentDecoder  # noqa: E402
from agents.commitlog.segment_reader import SegmentScan  # noqa: E402
from cassandra_model.ddl_parser import load_schema_from_cql  # noqa: E402
from cassandra_model.digest import update_digest  # noqa: E402
from cassandra_model.table_schema import SchemaCatalog  # noqa: E402

TABLE_DDL = """CREATE TABLE bench.readings (
    device uuid, at timestamp, kind text, value double, count int, total bigint,
    ok boolean, note text, price decimal, tags text,
    PRIMARY KEY (device, at)) WITH cdc = true"""


def generate(rows: int, target: Path) -> None:
    """Run the workload on a fresh node and copy its cdc_raw segments and the table DDL into `target`."""
    from cassandra.concurrent import execute_concurrent_with_args

    from infra.cassandra import CassandraNode, standalone_spec
    from infra.cql import connect
    from infra.settings import InfraSettings

    with tempfile.TemporaryDirectory(prefix="cdc-bench-decoder-") as home:
        settings = InfraSettings.from_env(home=Path(home), commitlog_segment_size_mb=32)
        node = CassandraNode(standalone_spec(settings, "bench", address="127.0.2.1", jmx_port=7601), settings)
        try:
            node.start()
            cluster = connect(node.spec.address)
            session = cluster.connect()
            session.execute(
                "CREATE KEYSPACE bench WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}"
            )
            session.execute(TABLE_DDL)
            table_id = session.execute(
                "SELECT id FROM system_schema.tables WHERE keyspace_name = 'bench' AND table_name = 'readings'"
            ).one()[0]
            insert = session.prepare(
                "INSERT INTO bench.readings (device, at, kind, value, count, total, ok, note, price, tags) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            )
            devices = [uuid.uuid4() for _ in range(1000)]
            params = [
                (devices[i % 1000], 1_700_000_000_000 + i, f"kind-{i % 7}", i * 0.25, i, i * 1000, i % 2 == 0,
                 f"note number {i}", Decimal(i) / 100, "a,b,c")
                for i in range(rows)
            ]  # fmt: skip
            started = time.monotonic()
            execute_concurrent_with_args(session, insert, params, concurrency=64)
            print(f"wrote {rows} rows in {time.monotonic() - started:.1f} s", file=sys.stderr)
            cluster.shutdown()
            time.sleep(1.0)  # two periodic syncs: the idx offsets cover every acknowledged write
            target.mkdir(parents=True, exist_ok=True)
            for segment in list_cdc_segments(node.spec.cdc_raw):
                if segment.index is not None and segment.index.offset > 0:
                    data = segment.durable_bytes()
                    (target / segment.path.name).write_bytes(data)
            (target / "schema.cql").write_text(
                "CREATE KEYSPACE bench WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1};\n"
                f"{TABLE_DDL} AND ID = {table_id};\n"
            )
        finally:
            node.stop()


def best_of(runs: int, fn: Callable[[], int]) -> tuple[float, int]:
    times = []
    count = 0
    for _ in range(runs):
        started = time.perf_counter()
        count = fn()
        times.append(time.perf_counter() - started)
    return min(times), count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--segments", type=Path, help="reuse segments and schema.cql saved by --keep")
    parser.add_argument("--keep", type=Path, help="save the generated segments and schema.cql here")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path, help="write a Markdown report here")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="cdc-bench-segments-") as tmp:
        folder = args.segments or args.keep or Path(tmp)
        if args.segments is None:
            shutil.rmtree(folder, ignore_errors=True)
            generate(args.rows, folder)
        catalog = load_schema_from_cql(folder / "schema.cql")
        segments = [(p, p.read_bytes()) for p in sorted(folder.glob("CommitLog-*.log"))]
        command = " ".join(["bench/decoder_throughput.py", *sys.argv[1:]]).replace(str(folder), "DIR")
        report = measure(segments, catalog, args.runs, command)
    print(report)
    if args.out:
        args.out.write_text(report)
    return 0


def measure(segments: list[tuple[Path, bytes]], catalog: SchemaCatalog, runs: int, command: str) -> str:
    total_bytes = sum(len(data) for _, data in segments)

    def framing() -> int:
        n = 0
        for path, data in segments:
            for _ in SegmentScan(data, completed=True, name=path.name):
                n += 1
        return n

    # Updates are streamed and dropped, as the agent does: holding 100k decoded updates (a million
    # objects) in a list makes the cyclic GC rescan them and triples the time per mutation.
    def structure() -> int:
        n = 0
        for path, data in segments:
            for _ in SegmentDecoder(data, catalog, completed=True, name=path.name):
                n += 1
        return n

    def with_digest() -> int:
        n = 0
        for path, data in segments:
            for update in SegmentDecoder(data, catalog, completed=True, name=path.name):
                update_digest(update)
                n += 1
        return n

    def full_values() -> int:
        n = 0
        for path, data in segments:
            for update in SegmentDecoder(data, catalog, completed=True, name=path.name):
                update.partition_key_values()
                for row in update.rows:
                    row.clustering  # noqa: B018 - decoding is the point
                    for cell in row.cells:
                        cell.value  # noqa: B018
                n += 1
        return n

    lines = [
        "# Commit-log decoder throughput (one core)",
        "",
        f"Command: `.venv/bin/python {command}` (segments made by `--rows 100000 --keep DIR`)",
        f"Segments: {len(segments)} written by Cassandra 5.0 (descriptor 7, uncompressed), "
        f"{total_bytes / 1e6:.1f} MB durable; table `bench.readings`: 10 columns (uuid, timestamp, text, double, "
        "int, bigint, boolean, text, decimal, text), one row per mutation. Best of "
        f"{runs} runs, data in memory, measured {time.strftime('%Y-%m-%d')} on a {os.cpu_count()}-core machine.",
        "",
        "| path | mutations | seconds | mutations/s | MB/s |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, fn in (("framing", framing), ("structure", structure), ("structure + digest", with_digest),
                      ("full values", full_values)):  # fmt: skip
        seconds, count = best_of(runs, fn)
        lines.append(
            f"| {label} | {count:,} | {seconds:.2f} | {count / seconds:,.0f} | {total_bytes / seconds / 1e6:.1f} |"
        )
    profile = cProfile.Profile()
    profile.enable()
    structure()
    profile.disable()
    text = io.StringIO()
    pstats.Stats(profile, stream=text).strip_dirs().sort_stats("tottime").print_stats(8)
    body = text.getvalue()
    top = body[body.find("ncalls") :].rstrip()
    lines += ["", "Profile of the structure path (cProfile, top 8 by own time):", "", "```", top, "```", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
