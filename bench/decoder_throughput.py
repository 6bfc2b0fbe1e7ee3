"""Commit-log decoder throughput on one core, beside Cassandra's own reader, on real segments of a 10-column table.

Writes ROWS rows through a one-node Cassandra of its own (127.0.2.1, a temporary home, the CDC_* ports),
waits until the `_cdc.idx` offsets cover them, then measures on those segments, in rounds whose order
alternates (the cores are noisy, so figures are compared within a run):
  cassandra    Cassandra 5.0's own CommitLogReader (cassandra-all, the engine inside Debezium's and
               DataStax's agents), driven by bench/java/CommitLogReaderThroughput.java, compiled here with
               javac against the jars `cdc infra fetch` downloads; one thread, after JIT warm-up; the
               median and best of --java-runs timed passes
  framing      sync sections and entry CRCs only (SegmentScan)
  structure    framing + mutation decoding to partition updates, values left raw (the agent's path)
  digest       structure + the replica-stable MD5 of every update
  full values  structure + decoding every key, clustering and cell value to Python objects
  native       the native core's paths, when the measured checkout has one (see `native_paths`)
Our paths run in a child process of the measured checkout's own interpreter (`TREE/.venv/bin/python`),
best of --runs each. Before timing, both sides sum what they read (mutations, rows, cells, value bytes, a
CRC-32 checksum of every key, clustering and cell value, the cells' timestamps): the report says whether
Cassandra and our decoder read the same data.

    .venv/bin/python bench/decoder_throughput.py [--rows 100000] [--keep DIR | --segments DIR]
        [--rounds 3] [--runs 3] [--java-runs 10] [--agent-tree DIR] [--compare-tree DIR]
        [--out bench/decoder_throughput.md]

`--keep DIR` saves the generated segments and schema; `--segments DIR` reuses them (no Cassandra).
`--agent-tree DIR` measures the decoder of another checkout (default: this one); `--compare-tree DIR`
measures a second checkout in the same rounds (e.g. an old and a new tree), each with its own interpreter.
"""

from __future__ import annotations

import argparse
import cProfile
import importlib
import io
import json
import os
import platform
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from report_analysis import analysis_of

REPO = Path(__file__).resolve().parents[1]
JAVA_SOURCE = REPO / "bench" / "java" / "CommitLogReaderThroughput.java"
JAVA_LOGBACK = REPO / "bench" / "java" / "logback.xml"
JAVA_MAIN = "CommitLogReaderThroughput"
#: Java 17 with cassandra-all offline: FileUtils' static initialiser reaches into these two packages
JAVA_EXPORTS = (
    "--add-exports", "java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-exports", "java.base/jdk.internal.ref=ALL-UNNAMED",
)  # fmt: skip
RESULT_PREFIX = "RESULT "
#: A report's hand-written reading starts at this heading; a new run keeps it below the new tables.
ANALYSIS_HEADING = "## Reading the figures"
#: The native core's module, importable in a checkout that has built it (an optional import: without a
#: Rust toolchain the agent runs on the Python decoder). `--native-module` names another.
NATIVE_MODULE = "cdc_native"
#: Which sums must agree between Cassandra's reader and ours for the report to call the data the same.
CHECKED_SUMS = ("mutations", "rows", "cells", "value_bytes", "content_crc_sum", "timestamp_sum")
PATHS = ("framing", "structure", "structure + digest", "full values")

TABLE_DDL = """CREATE TABLE bench.readings (
    device uuid, at timestamp, kind text, value double, count int, total bigint,
    ok boolean, note text, price decimal, tags text,
    PRIMARY KEY (device, at)) WITH cdc = true"""


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine spent busy since boot (the parent's /proc reading of the benches)."""
    sys.path.insert(0, str(REPO / "bench"))
    from agent_pipeline import system_busy_seconds

    return system_busy_seconds()


def wait_quiet(busy_limit_percent: float, max_wait_s: float, window_s: float = 5.0) -> tuple[float, float]:
    """Until the whole machine was under `busy_limit_percent` busy over `window_s` (other people's work
    shares it), at most `max_wait_s`; (seconds waited, busy % of the last window)."""
    started = time.monotonic()
    cores = os.cpu_count() or 1
    while True:
        b0 = machine_busy_seconds()
        time.sleep(window_s)
        busy = 100 * (machine_busy_seconds() - b0) / (window_s * cores)
        waited = time.monotonic() - started
        if busy < busy_limit_percent or waited >= max_wait_s:
            return waited, busy
        say(f"  machine {busy:.0f}% busy over {window_s:.0f} s; waiting for a quieter moment")


# -- the segments ------------------------------------------------------------------------------------


def generate(rows: int, target: Path) -> None:
    """Run the workload on a fresh node and copy its cdc_raw segments and the table DDL into `target`."""
    sys.path.insert(0, str(REPO))
    from cassandra.concurrent import execute_concurrent_with_args

    from agents.cdc_raw import list_cdc_segments
    from infra.cassandra import CassandraNode, standalone_spec
    from infra.cql import connect
    from infra.settings import InfraSettings

    with tempfile.TemporaryDirectory(prefix="cdc-bench-decoder-") as home:
        settings = InfraSettings.from_env(home=Path(home), commitlog_segment_size_mb=32)
        # JMX beside the local cluster's (its nodes take the base port, +100 and +200)
        spec = standalone_spec(settings, "bench", address="127.0.2.1", jmx_port=settings.jmx_base_port + 400)
        node = CassandraNode(spec, settings)
        try:
            node.start()
            cluster = connect(node.spec.address, node.spec.cql_port)
            session = cluster.connect()
            table_id = create_bench_table(session)
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
            say(f"wrote {rows} rows in {time.monotonic() - started:.1f} s")
            cluster.shutdown()
            time.sleep(1.0)  # ten periodic syncs: the idx offsets cover every acknowledged write
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


def create_bench_table(session: Any) -> uuid.UUID:
    """Keyspace `bench` and its 10-column table `bench.readings` WITH cdc = true; the table's id."""
    session.execute(
        "CREATE KEYSPACE bench WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}"
    )
    session.execute(TABLE_DDL)
    return session.execute(
        "SELECT id FROM system_schema.tables WHERE keyspace_name = 'bench' AND table_name = 'readings'"
    ).one()[0]


def segment_files(folder: Path) -> list[Path]:
    """The folder's segments in id order (the number after the last dash), as a node writes them."""
    return sorted(folder.glob("CommitLog-*.log"), key=lambda p: int(p.stem.rsplit("-", 1)[-1]))


# -- our decoder, in a child process of the measured checkout ----------------------------------------


def best_of(runs: int, fn: Callable[[], int]) -> tuple[float, int]:
    times = []
    count = 0
    for _ in range(runs):
        started = time.perf_counter()
        count = fn()
        times.append(time.perf_counter() - started)
    return min(times), count


def native_paths(
    module_name: str, segments: list[tuple[Path, bytes]], catalog: Any
) -> tuple[dict[str, Any], str]:
    """The native core's timed paths over the same segments ({label: fn returning the updates decoded}),
    and a line for the report.

    The native core is an optional import: a checkout without it (or built without a Rust toolchain)
    reports "none". Its batch calls are those of bench/native_core.py (a segment in, updates with
    digests, or ready-to-send records out), set beside the Python paths and Cassandra's reader.
    """
    try:
        native = importlib.import_module(module_name)
    except ImportError as exc:
        return {}, f"none in this checkout (`import {module_name}`: {exc})"
    where = getattr(native, "__file__", "?")
    version = getattr(native, "__version__", "?")
    checkout = Path(str(importlib.import_module("agents").__file__)).parents[1]
    sys.path.insert(0, str(checkout / "bench"))
    try:
        # the measured checkout's own adapter (its bench/native_core.py)
        native_core = importlib.import_module("native_core")
    except ImportError as exc:
        return {}, f"`{module_name}` {version} imports, but this checkout has no bench/native_core.py ({exc})"
    timed = native_core.paths(segments, catalog)
    return (
        {
            "native: structure + digest": timed["native digest"],
            "native: ready-to-send events": timed["native events"],
        },
        f"`{module_name}` {version} ({Path(str(where)).name})",
    )


def content_sums(segments: list[tuple[Path, bytes]], catalog: Any) -> dict[str, Any]:
    """What our decoder read, summed as bench/java/CommitLogReaderThroughput.java sums what Cassandra read."""
    from agents.commitlog.log_reader import SegmentDecoder

    entries: set[tuple[str, int]] = set()
    sums = dict.fromkeys(("updates", "rows", "cells", "value_bytes", "content_crc_sum", "timestamp_sum"), 0)
    decode_errors = unknown = 0
    for path, data in segments:
        decoder = SegmentDecoder(data, catalog, completed=True, name=path.name)
        for update in decoder:
            entries.add((path.name, update.offset or 0))
            sums["updates"] += 1
            crc = zlib.crc32(update.partition_key)
            rows = update.rows if update.static_row is None else [update.static_row, *update.rows]
            for row in rows:
                sums["rows"] += 1
                crc += sum(zlib.crc32(v) for v in row.clustering_raw if v is not None)
                for cell in row.cells:
                    sums["cells"] += 1
                    sums["value_bytes"] += len(cell.raw)
                    crc += zlib.crc32(cell.raw)
                    sums["timestamp_sum"] += cell.timestamp
            sums["content_crc_sum"] += crc
        decode_errors += len(decoder.stats.decode_errors)
        unknown += sum(decoder.stats.unknown_tables.values())
    sums["content_crc_sum"] %= 2**64
    sums["timestamp_sum"] %= 2**64
    return {
        "mutations": len(entries),
        **sums,
        "decode_errors": decode_errors,
        "unknown_table_entries": unknown,
    }


def measure_tree(folder: Path, runs: int, profile: bool, native_module: str) -> dict[str, Any]:
    """This process's checkout (first on sys.path): its decoder's paths over the folder's segments."""
    from agents.commitlog.log_reader import SegmentDecoder
    from agents.commitlog.segment_reader import SegmentScan
    from cassandra_model.ddl_parser import load_schema_from_cql
    from cassandra_model.digest import update_digest

    catalog = load_schema_from_cql(folder / "schema.cql")
    segments = [(p, p.read_bytes()) for p in segment_files(folder)]

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

    native, native_note = native_paths(native_module, segments, catalog)
    result: dict[str, Any] = {"sums": content_sums(segments, catalog), "paths": {}, "native": native_note}
    for label, fn in (("framing", framing), ("structure", structure), ("structure + digest", with_digest),
                      ("full values", full_values), *native.items()):  # fmt: skip
        seconds, count = best_of(runs, fn)
        result["paths"][label] = {"seconds": seconds, "count": count}
    if profile:
        profiler = cProfile.Profile()
        profiler.enable()
        structure()
        profiler.disable()
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).strip_dirs().sort_stats("tottime").print_stats(8)
        body = text.getvalue()
        result["profile"] = body[body.find("ncalls") :].rstrip()
    result["python"] = platform.python_version()
    return result


# -- Cassandra's reader ------------------------------------------------------------------------------


@dataclass(slots=True)
class JavaHarness:
    """The compiled harness and how to run it."""

    java: Path
    classpath: str
    version: str

    def command(self, tables: Path, files: list[Path], runs: int) -> list[str]:
        return [
            str(self.java), "-Xms1g", "-Xmx1g", *JAVA_EXPORTS, f"-Dlogback.configurationFile={JAVA_LOGBACK}",
            "-cp", self.classpath, JAVA_MAIN, "--tables", str(tables), "--runs", str(runs),
            "--warmup-passes", "5", "--warmup-seconds", "5", *map(str, files),
        ]  # fmt: skip


def build_java_harness(build: Path) -> JavaHarness:
    """javac the harness against the Cassandra jars of the project's cache (downloaded if missing)."""
    sys.path.insert(0, str(REPO))
    from infra.artifacts import ensure_cassandra
    from infra.settings import InfraSettings
    from infra.toolchain import find_java

    java = find_java()
    javac = java.executable.resolve().parent / "javac"
    if not javac.is_file():
        raise SystemExit(f"no javac beside {java.executable}: install a JDK 17 (not only a JRE)")
    lib = ensure_cassandra(InfraSettings.from_env())
    classpath = f"{build}{os.pathsep}{lib}/*"
    done = subprocess.run(
        [str(javac), "-nowarn", "-d", str(build), "-cp", f"{lib}/*", str(JAVA_SOURCE)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"javac failed on {JAVA_SOURCE}:\n{done.stdout}{done.stderr}")
    return JavaHarness(java.executable, classpath, java.version)


def write_tables_file(catalog: Any, target: Path) -> None:
    """One line per table for the harness: keyspace, a tab, its CREATE TABLE ... WITH ID statement."""
    sys.path.insert(0, str(REPO))
    from cassandra_model.schema_cql import table_to_cql

    lines = []
    for table in catalog.tables():
        statements = [s.strip() for s in table_to_cql(table).split(";\n") if s.strip()]
        if len(statements) != 1:
            raise SystemExit(
                f"{table.keyspace}.{table.table}: the Java harness registers plain CREATE TABLE statements, but "
                f"this table needs {len(statements)} (user types or dropped columns)"
            )
        lines.append(f"{table.keyspace}\t{' '.join(statements[0].split())}")
    target.write_text("\n".join(lines) + "\n")


def result_line(stdout: str) -> dict[str, Any]:
    """The JSON of a child's `RESULT {...}` line (its last one); ValueError when there is none."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX) :])
    raise ValueError("no RESULT line in the output")


def run_child(argv: list[str], what: str, cwd: Path | None = None) -> dict[str, Any]:
    done = subprocess.run(argv, capture_output=True, text=True, cwd=cwd)
    try:
        result = result_line(done.stdout)
    except ValueError:
        raise SystemExit(
            f"{what} failed (exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        ) from None
    result["exit"] = done.returncode
    return result


# -- the run -----------------------------------------------------------------------------------------


@dataclass(slots=True)
class Tree:
    """A checkout whose decoder is measured, with the interpreter that runs it."""

    label: str
    path: Path
    python: Path
    commit: str

    @classmethod
    def of(cls, label: str, path: Path) -> Tree:
        path = path.resolve()
        if not (path / "agents" / "commitlog" / "log_reader.py").is_file():
            raise SystemExit(f"--agent-tree/--compare-tree {path}: not a checkout of this project")
        venv = path / ".venv" / "bin" / "python"
        return cls(label, path, venv if venv.is_file() else Path(sys.executable), describe_commit(path))


def describe_commit(path: Path) -> str:
    """`<short hash> (<branch>)`, `+ changes` when the work tree differs from it."""
    git = ["git", "-C", str(path)]
    commit = subprocess.run(
        [*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    branch = subprocess.run([*git, "branch", "--show-current"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(
        [*git, "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True
    )
    return f"{commit or '?'}{f' ({branch})' if branch else ''}{' + changes' if dirty.stdout.strip() else ''}"


@dataclass(slots=True)
class Round:
    number: int
    order: list[str]
    java: dict[str, Any] = field(default_factory=dict)
    trees: dict[str, dict[str, Any]] = field(default_factory=dict)
    busy: dict[str, float] = field(default_factory=dict)
    """the whole machine's busy % while each reader ran (one busy core of two is 50%)"""


def java_rates(java: dict[str, Any]) -> tuple[float, float]:
    """(median, best) mutations/s of the harness's timed passes."""
    rates = [java["mutations"] / s for s in java["run_seconds"]]
    return statistics.median(rates), max(rates)


def sums_verdict(java: dict[str, Any], ours: dict[str, Any]) -> str:
    """ "same" when every checked sum agrees, else the ones that differ."""
    differ = [f"{k} {java[k]} vs {ours[k]}" for k in CHECKED_SUMS if str(java[k]) != str(ours[k])]
    return "same" if not differ else "DIFFERENT: " + "; ".join(differ)


def report(rounds: list[Round], trees: list[Tree], meta: dict[str, Any]) -> str:
    """The Markdown report: per round, then medians over rounds with the ratios to Cassandra's reader."""
    first = rounds[0]
    java0 = first.java
    lines = [
        "# Commit-log decoder throughput (one core), beside Cassandra's own reader",
        "",
        f"Command: `{meta['command']}`",
        "",
        f"Segments: {java0['segments']} written by Cassandra 5.0 (descriptor 7, uncompressed), "
        f"{java0['bytes'] / 1e6:.1f} MB durable; table `bench.readings`: 10 columns (uuid, timestamp, text, "
        "double, int, bigint, boolean, text, decimal, text), one row per mutation. "
        f"Measured {meta['date']} on a {meta['cores']}-core machine ({meta['cpu']}); load average before "
        f"{meta['load_before']}, after {meta['load_after']}.",
        "",
        f"- **Cassandra's reader**: `CommitLogReader` of cassandra-all {java0['cassandra']} on Java "
        f"{java0['java']}, one thread, `readCommitLogSegment` over each file (page cache) into a handler that "
        "visits every row and cell; after JIT warm-up (at least 5 passes and 5 s: "
        f"{java0['warmup_passes']} passes in {java0['warmup_s']:.1f} s), the median and best of "
        f"{len(java0['run_seconds'])} passes. It validates every value and builds cell objects: more than "
        "our structure path, less than full values.",
        f"- **Ours**: the best of {meta['runs']} run(s) per path, data in memory, one Python thread, in a child "
        "process of each checkout's own interpreter.",
        f"- {len(rounds)} rounds; the order alternates between rounds. Each reader starts once the machine was under "
        f"{meta['quiet_percent']:.0f}% busy for 5 s (waiting {meta['quiet_wait']:.0f} s at most); the rounds table "
        "says how busy the whole machine was while each ran (one busy core of two is 50%: more is other work).",
        "",
        "| checkout | commit | Python | native core |",
        "|---|---|---|---|",
    ]
    for t in trees:
        res = first.trees[t.label]
        lines.append(f"| {t.label} | {t.commit} | {res['python']} | {res['native']} |")
    lines += ["", "## Same data read", ""]
    lines.append("| checkout | mutations | rows | cells | value bytes | checksums | decode errors |")
    lines.append("|---|---:|---:|---:|---:|---|---:|")
    lines.append(
        f"| Cassandra's reader | {java0['mutations']:,} | {java0['rows']:,} | {java0['cells']:,} | "
        f"{java0['value_bytes']:,} | - | {len(java0['problems'])} |"
    )
    for t in trees:
        s = first.trees[t.label]["sums"]
        lines.append(
            f"| {t.label} | {s['mutations']:,} | {s['rows']:,} | {s['cells']:,} | {s['value_bytes']:,} | "
            f"{sums_verdict(java0, s)} | {s['decode_errors']} |"
        )
    if java0["tolerated"]:
        lines.append(f"\nCassandra tolerated (torn tail of a live segment): {'; '.join(java0['tolerated'])}")
    lines += ["", "## Every round", ""]
    labels = [lbl for lbl in first.trees[trees[0].label]["paths"]]
    lines.append("| round | order (machine busy % while each ran) | Cassandra median | Cassandra best | " + " | ".join(
        f"{t.label}: {p}" for t in trees for p in labels) + " |")  # fmt: skip
    lines.append("|---:|---|---:|---:|" + "---:|" * (len(trees) * len(labels)))
    for r in rounds:
        median, best = java_rates(r.java)
        cells = [f"{paths[p]['count'] / paths[p]['seconds']:,.0f}" for t in trees
                 for paths in [r.trees[t.label]["paths"]] for p in labels]  # fmt: skip
        order = ", ".join(f"{name} ({r.busy.get(name, float('nan')):.0f}%)" for name in r.order)
        lines.append(f"| {r.number} | {order} | {median:,.0f} | {best:,.0f} | {' | '.join(cells)} |")
    lines += ["", "## Medians over the rounds (mutations/s; ratio = ours / Cassandra's best, same round)", ""]
    lines.append("| reader | path | mutations | mutations/s | MB/s | x Cassandra |")
    lines.append("|---|---|---:|---:|---:|---:|")
    medians = [java_rates(r.java)[0] for r in rounds]
    bests = [java_rates(r.java)[1] for r in rounds]
    mb = java0["bytes"] / 1e6
    lines.append(
        f"| Cassandra {java0['cassandra']} `CommitLogReader` | median pass | {java0['mutations']:,} | "
        f"{statistics.median(medians):,.0f} | {statistics.median(medians) * mb / java0['mutations']:.1f} | - |"
    )
    lines.append(
        f"| Cassandra {java0['cassandra']} `CommitLogReader` | best pass | {java0['mutations']:,} | "
        f"{statistics.median(bests):,.0f} | {statistics.median(bests) * mb / java0['mutations']:.1f} | 1.00 |"
    )
    for t in trees:
        for p in labels:
            rates = [
                r.trees[t.label]["paths"][p]["count"] / r.trees[t.label]["paths"][p]["seconds"]
                for r in rounds
            ]
            ratios = [rate / java_rates(r.java)[1] for rate, r in zip(rates, rounds, strict=True)]
            count = first.trees[t.label]["paths"][p]["count"]
            rate = statistics.median(rates)
            lines.append(
                f"| {t.label} | {p} | {count:,} | {rate:,.0f} | {rate * mb / count:.1f} | "
                f"{statistics.median(ratios):.2f} |"
            )
    lines.append("")
    lines.append(
        "`framing` counts every entry (Cassandra's own system-table mutations too); the other paths count "
        "updates of `bench.readings`, as Cassandra's `mutations` does."
    )
    for t in trees:
        profile = first.trees[t.label].get("profile")
        if profile:
            lines += ["", f"Profile of the structure path, {t.label} (cProfile, top 8 by own time):", "",
                      "```", profile, "```"]  # fmt: skip
    return "\n".join(lines) + "\n"


def round_order(number: int, names: list[str]) -> list[str]:
    """The order of round `number` (from 1): as given, then reversed, and so on."""
    return list(names) if number % 2 == 1 else list(reversed(names))


def shown_command(argv: list[str], paths: dict[str, str]) -> str:
    """The command line as the report shows it: the given paths replaced by their placeholders."""
    text = " ".join([".venv/bin/python bench/decoder_throughput.py", *argv])
    for path, placeholder in sorted(paths.items(), key=lambda kv: -len(kv[0])):
        text = text.replace(path, placeholder)
    return text


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--segments", type=Path, help="reuse segments and schema.cql saved by --keep")
    parser.add_argument("--keep", type=Path, help="save the generated segments and schema.cql here")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every reader, order alternating")
    parser.add_argument(
        "--runs", type=int, default=3, help="runs of each of our paths per round (best counts)"
    )
    parser.add_argument(
        "--java-runs", type=int, default=10, help="timed passes of Cassandra's reader per round"
    )
    parser.add_argument("--agent-tree", type=Path, default=REPO, help="the checkout measured (default: this)")
    parser.add_argument("--compare-tree", type=Path, help="a second checkout measured in the same rounds")
    parser.add_argument("--native-module", default=NATIVE_MODULE, help="the native core's module name")
    parser.add_argument("--quiet-percent", type=float, default=25.0,
                        help="start each reader when the machine is under this %% busy")  # fmt: skip
    parser.add_argument("--quiet-wait", type=float, default=120.0, help="but wait at most this many seconds")
    parser.add_argument("--no-profile", action="store_true", help="skip the cProfile of the structure path")
    parser.add_argument("--out", type=Path, help="write the Markdown report here")
    parser.add_argument("--measure-tree", type=Path, help=argparse.SUPPRESS)  # child mode: one checkout
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.runs < 1 or args.java_runs < 1:
        parser.error("--rounds, --runs and --java-runs must be >= 1")
    return args


def child_main(args: argparse.Namespace) -> int:
    """Child mode: the checkout given comes first on sys.path, its decoder is measured, RESULT printed."""
    sys.path.insert(0, str(args.measure_tree))
    import agents.commitlog.log_reader as decoder

    if not Path(decoder.__file__).resolve().is_relative_to(args.measure_tree.resolve()):
        raise SystemExit(f"the decoder imported is {decoder.__file__}, not the one of {args.measure_tree}")
    result = measure_tree(args.segments, args.runs, not args.no_profile, args.native_module)
    print(RESULT_PREFIX + json.dumps(result))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.measure_tree is not None:
        return child_main(args)
    trees = [Tree.of("this checkout" if args.agent_tree.resolve() == REPO else "agent tree", args.agent_tree)]
    if args.compare_tree is not None:
        trees.append(Tree.of("compare tree", args.compare_tree))
    placeholders = {
        str(args.agent_tree): "TREE",
        **({str(args.compare_tree): "OTHER_TREE"} if args.compare_tree else {}),
    }
    load_before = " ".join(f"{v:.2f}" for v in os.getloadavg())

    with tempfile.TemporaryDirectory(prefix="cdc-bench-segments-") as tmp:
        work = Path(tmp)
        folder = args.segments or args.keep or work / "segments"
        if args.segments is None:
            shutil.rmtree(folder, ignore_errors=True)
            generate(args.rows, folder)
        placeholders[str(folder)] = "DIR"
        sys.path.insert(0, str(REPO))
        from cassandra_model.ddl_parser import load_schema_from_cql

        files = segment_files(folder)
        if not files:
            raise SystemExit(f"no CommitLog-*.log segments in {folder}")
        tables = work / "tables.txt"
        write_tables_file(load_schema_from_cql(folder / "schema.cql"), tables)
        (work / "java").mkdir()
        harness = build_java_harness(work / "java")

        rounds = []
        names = ["cassandra", *(t.label for t in trees)]
        for number in range(1, args.rounds + 1):
            r = Round(number, round_order(number, names))
            for name in r.order:
                waited, busy = wait_quiet(args.quiet_percent, args.quiet_wait)
                say(
                    f"round {number}/{args.rounds}: {name} (after {waited:.0f} s, the machine {busy:.0f}% busy)"
                )
                busy0, started = machine_busy_seconds(), time.monotonic()
                if name == "cassandra":
                    r.java = run_child(harness.command(tables, files, args.java_runs), "Cassandra's reader")
                else:
                    tree = next(t for t in trees if t.label == name)
                    r.trees[name] = measure_child(tree, folder, args, number)
                cores = os.cpu_count() or 1
                r.busy[name] = 100 * (machine_busy_seconds() - busy0) / ((time.monotonic() - started) * cores)
            rounds.append(r)
        meta = {
            "command": shown_command(argv, placeholders),
            "date": time.strftime("%Y-%m-%d"),
            "cores": os.cpu_count(),
            "cpu": cpu_model(),
            "runs": args.runs,
            "quiet_percent": args.quiet_percent,
            "quiet_wait": args.quiet_wait,
            "load_before": load_before,
            "load_after": " ".join(f"{v:.2f}" for v in os.getloadavg()),
        }
        text = report(rounds, trees, meta) + analysis_of(args.out, ANALYSIS_HEADING)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0 if all(r.java["exit"] == 0 for r in rounds) else 1


def measure_child(tree: Tree, folder: Path, args: argparse.Namespace, number: int) -> dict[str, Any]:
    """Our decoder's paths in a child of the checkout's own interpreter (a profile in the first round only)."""
    child = [str(tree.python), str(Path(__file__).resolve()), "--measure-tree", str(tree.path),
             "--segments", str(folder), "--runs", str(args.runs), "--native-module", args.native_module,
             *(["--no-profile"] if args.no_profile or number > 1 else [])]  # fmt: skip
    return run_child(child, f"the decoder of {tree.label}", cwd=tree.path)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


if __name__ == "__main__":
    sys.exit(main())
