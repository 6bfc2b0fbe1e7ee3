"""The native core against the Python decoder on the same segments, one core, alternating.

Times, in this single thread, over segments saved by `bench/decoder_throughput.py --keep DIR` (held in
memory), rounds of:
  python digest     framing + mutation decoding + the replica-stable MD5 (SegmentDecoder, update_digest)
  native digest     the same in the native core, one call per segment (cdc_native.digest_segment)
  python events     what the agent's Python core does per event: digest, raw-event record, Avro value, key
  native events     the native core's batches as the agent reads them (NativeSegmentDecoder.batches): Avro
                    value and key bytes, entry end and Kafka partition of every event
Each round runs every path once in turn (the order rotates), so both cores see the same machine load;
the report gives the best and the median round of each, and the native/Python ratio of the medians.

    .venv/bin/python bench/native_core.py --segments DIR [--rounds 7] [--out bench/native_core.md]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from agents.commitlog.compression import decompress  # noqa: E402
from agents.commitlog.errors import CorruptSectionError  # noqa: E402
from agents.commitlog.log_reader import SegmentDecoder  # noqa: E402
from agents.commitlog.native_core import (  # noqa: E402
    EventBatch,
    NativeCatalog,
    NativeSegmentDecoder,
    cdc_native,
    publish_all,
)
from agents.commitlog.segment_reader import SegmentScan  # noqa: E402
from cassandra_model.ddl_parser import load_schema_from_cql  # noqa: E402
from cassandra_model.digest import update_digest  # noqa: E402
from cassandra_model.table_schema import SchemaCatalog  # noqa: E402
from schemas.raw_event import encode_raw_event, encode_raw_key, raw_event_record  # noqa: E402

PARTITIONS = list(range(12))


def paths(segments: list[tuple[Path, bytes]], catalog: SchemaCatalog) -> dict[str, Callable[[], int]]:
    native_catalog = NativeCatalog(catalog, publish_all)

    def python_digest() -> int:
        n = 0
        for path, data in segments:
            for update in SegmentDecoder(data, catalog, completed=True, name=path.name):
                update_digest(update)
                n += 1
        return n

    def native_digest() -> int:
        n = 0
        for path, data in segments:
            with SegmentScan(data, completed=True, name=path.name) as scan:
                desc = scan.descriptor
            assert desc is not None
            codec = desc.compression

            def inflate(
                raw: bytes, length: int, offset: int, codec: object = codec, name: str = path.name
            ) -> bytes:
                return decompress(codec, raw, length, segment=name, offset=offset)  # type: ignore[arg-type]

            updates, _, _ = cdc_native.digest_segment(
                path.name, None, data, True, desc.header_end, desc.segment_id, codec is not None,
                desc.messaging_version, native_catalog.current(), inflate if codec else None, CorruptSectionError,
            )  # fmt: skip
            n += updates
        return n

    def python_events() -> int:
        n = 0
        for path, data in segments:
            decoder = SegmentDecoder(data, catalog, completed=True, name=path.name)
            version = decoder.descriptor.version if decoder.descriptor else 0
            for update in decoder:
                record = raw_event_record(update, cluster="bench", node="node1", segment_id=0,
                                          descriptor_version=version, digest=update_digest(update),
                                          published_at_ms=int(time.time() * 1000))  # fmt: skip
                encode_raw_key(update.keyspace, update.table, update.partition_key)
                encode_raw_event(record)
                n += 1
        return n

    def native_events() -> int:
        n = 0
        for path, data in segments:
            decoder = NativeSegmentDecoder(data, catalog, native_catalog, cluster="bench", node="node1",
                                           completed=True, name=path.name)  # fmt: skip
            for item in decoder.batches(partitions=PARTITIONS):
                n += len(item.ends) if isinstance(item, EventBatch) else len(item)
        return n

    return {
        "python digest": python_digest,
        "native digest": native_digest,
        "python events": python_events,
        "native events": native_events,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--segments", type=Path, required=True, help="segments and schema.cql saved by --keep"
    )
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out", type=Path, help="write a Markdown report here")
    args = parser.parse_args()
    if cdc_native is None:
        parser.error("the native core is not installed (make setup builds it)")
    catalog = load_schema_from_cql(args.segments / "schema.cql")
    segments = [(p, p.read_bytes()) for p in sorted(args.segments.glob("CommitLog-*.log"))]
    total_bytes = sum(len(d) for _, d in segments)
    runs = paths(segments, catalog)
    load_before = os.getloadavg()
    times: dict[str, list[float]] = {name: [] for name in runs}
    cpus: dict[str, list[float]] = {name: [] for name in runs}
    counts: dict[str, int] = {}
    names = list(runs)
    for round_ in range(args.rounds):
        order = names[round_ % len(names) :] + names[: round_ % len(names)]
        for name in order:
            started, cpu = time.perf_counter(), time.process_time()
            counts[name] = runs[name]()
            times[name].append(time.perf_counter() - started)
            cpus[name].append(time.process_time() - cpu)
        print(
            f"round {round_ + 1}: " + ", ".join(f"{n} {times[n][-1]:.2f} s" for n in names), file=sys.stderr
        )
    load_after = os.getloadavg()
    command = " ".join([".venv/bin/python bench/native_core.py", *sys.argv[1:]]).replace(
        str(args.segments), "DIR"
    )
    if args.out:
        command = command.replace(
            str(args.out), args.out.name if args.out.parent == REPO / "bench" else str(args.out)
        )
    lines = [
        "# Native core vs Python decoder (one core, same segments, alternating)",
        "",
        f"Command: `{command}` (segments made by `bench/decoder_throughput.py --rows 100000 --keep DIR`)",
        "",
        f"Segments: {len(segments)}, {total_bytes / 1e6:.1f} MB durable, table `bench.readings` (10 columns, one "
        f"row per mutation), held in memory. {args.rounds} rounds, each running every path once (order "
        f"rotating). Measured {time.strftime('%Y-%m-%d')} on a {os.cpu_count()}-core machine; `uptime` load "
        f"average before {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}, after "
        f"{load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f} (other jobs share the machine).",
        "",
        "Wall: elapsed time of the run; CPU: this process's CPU time over it (less disturbed by other jobs).",
        "",
        "| path | mutations | best wall s | median wall s | best mutations/s (wall) | median mutations/s (wall) "
        "| median CPU s | mutations/s (median CPU) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name in names:
        best, median = min(times[name]), statistics.median(times[name])
        cpu_median = statistics.median(cpus[name])
        lines.append(f"| {name} | {counts[name]:,} | {best:.3f} | {median:.3f} | {counts[name] / best:,.0f} | "
                     f"{counts[name] / median:,.0f} | {cpu_median:.3f} | {counts[name] / cpu_median:,.0f} |")  # fmt: skip
    lines.append("")
    for kind in ("digest", "events"):
        py, nat = statistics.median(times[f"python {kind}"]), statistics.median(times[f"native {kind}"])
        py_cpu, nat_cpu = statistics.median(cpus[f"python {kind}"]), statistics.median(cpus[f"native {kind}"])
        lines.append(f"- {kind}: native is {py / nat:.1f}x the Python decoder by wall time, {py_cpu / nat_cpu:.1f}x "
                     "by CPU time (medians).")  # fmt: skip
    lines.append("")
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
