"""The native core (the `cdc_native` extension built from `native/`) for the bootstrap's per-row work and
the replay's raw events, when it is installed: the one module of the pipeline that imports it.

The Spark tasks of `cdc pipeline bootstrap` cut every result page of the scan into values
(``cassandra_scan._raw_rows``) before the events are built; in Rust that takes a third of the Python's CPU (about 3 µs a row of the bench table against 10).
Then the events are built from those rows (``SnapshotEncoder``; ``pipeline.snapshot_core`` chooses it): about
3 µs a row against 28 (bench/bootstrap_build.md).
The Python code stays the specification and the fallback (a `pip install .` without a Rust toolchain),
and tests hold both to identical output. The extension is a compiled package of the installation, not part
of the code zip a cluster's executors get: where an executor lacks it, its tasks run the Python.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

try:
    import cdc_native
except ImportError:  # not built: the Python path runs
    cdc_native = None

#: ``cassandra_scan._raw_rows`` in Rust (native/src/protocol_rows.rs), or None
raw_rows: Callable[[bytes, int, int], list[list[bytes | None]]] | None = (
    cdc_native.raw_rows if cdc_native is not None else None
)

#: the bootstrap's event builder in Rust (native/src/snapshot_events.rs; ``snapshot_encoder.SnapshotEncoder``
#: is its specification), or None
SnapshotEncoder: Any = getattr(cdc_native, "SnapshotEncoder", None)

#: one raw event's dict in Rust (native/src/raw_event_dict.rs; ``schemas.raw_event.decode_raw_event`` is its
#: specification), None for odd bytes; or None where not installed
decode_raw_event: Any = getattr(cdc_native, "decode_raw_event", None)
