"""Which encoder builds the bootstrap's raw events, as ``pipeline.core`` chooses it (``runtime.core_choice``):
the native one (``cdc_native.SnapshotEncoder`` through ``pipeline.native_core``, built from native/ by
`make setup`) or ``snapshot_encoder.SnapshotEncoder``, its specification and the fallback where the
extension is not installed.

Both give, per partition of consecutive raw rows, its key and its ``SnapshotEvent``s, byte for byte the same
(tests/unit/pipeline/test_snapshot_core.py). The native one is built from the Python encoder's plans (column
positions and layouts, the record's head, the digest's head), so the two read one description of the table;
it takes whole result pages (``events_of_pages``, the bootstrap's way), never cut into Python values; its
errors come back as the Python encoder's ``PipelineError``s.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from cassandra_model.cql_types import CellLayout
from cassandra_model.digest import digest_head
from cassandra_model.partition_update import NO_DELETION_TIME
from cassandra_model.table_schema import TableSchema
from pipeline import native_core
from pipeline.cassandra_scan import RawPage
from pipeline.errors import PipelineError
from pipeline.snapshot_encoder import SnapshotEncoder, _Column
from pipeline.snapshot_events import MAX_BYTES_PER_EVENT, MAX_ROWS_PER_EVENT, SnapshotEvent
from runtime.config import CdcConfig
from runtime.core_choice import choose_core, core_description
from state.snapshot_lists import SNAPSHOT_LIST_PATH_TAIL

#: "native" when the installed extension has the snapshot encoder, else "python"
AVAILABLE = "native" if native_core.SnapshotEncoder is not None else "python"

#: the native side's code of each cell layout
_LAYOUTS = {
    CellLayout.SINGLE: 0,
    CellLayout.SET: 1,
    CellLayout.LIST: 2,
    CellLayout.MAP: 3,
    CellLayout.FIELDS: 4,
}


def _plan(column: _Column) -> tuple[str, int, int, int, int, int]:
    return (
        column.name,
        _LAYOUTS[column.layout],
        column.value_at,
        column.time_at,
        column.ttl_at,
        column.fields,
    )


class NativeSnapshotEncoder:
    """``SnapshotEncoder.events_of_pages`` on the native core, for one Spark task's result pages."""

    def __init__(self, spec: SnapshotEncoder) -> None:
        self.schema = spec.schema
        self._native = native_core.SnapshotEncoder(
            spec.schema.name,
            [_plan(c) for c in spec.static],
            [_plan(c) for c in spec.regular],
            spec.key_at,
            spec.clustering_at,
            spec.scan_time_at,
            spec.head,
            spec.key_head,
            digest_head(spec.schema.table_id),
            spec.max_rows,
            spec.max_bytes,
            NO_DELETION_TIME,
            SNAPSHOT_LIST_PATH_TAIL,
        )

    def events_of_pages(self, pages: Iterable[RawPage]) -> Iterator[tuple[bytes, list[SnapshotEvent]]]:
        """Per partition (its rows consecutive, as the scan gives them): its key and its events, each
        page handed over whole: its values are cut and read in the native code and never become Python
        objects."""
        for page in pages:
            yield from self._built(self._native.push_page, page.data, page.count, page.width, page.scan_time)
        yield from self._built(self._native.finish)

    def _built(self, call: Any, *args: Any) -> Iterator[tuple[bytes, list[SnapshotEvent]]]:
        try:
            partitions = call(*args)
        except ValueError as exc:  # the native encoder's word for bad raw bytes
            raise PipelineError(str(exc)) from None
        for key, built in partitions:
            yield key, [SnapshotEvent(*event) for event in built]


def snapshot_encoder(
    schema: TableSchema,
    *,
    core: str,
    cluster: str,
    published_at_ms: int,
    max_rows: int = MAX_ROWS_PER_EVENT,
    max_bytes: int = MAX_BYTES_PER_EVENT,
) -> SnapshotEncoder | NativeSnapshotEncoder:
    """The encoder of ``core`` (``native`` or ``python``, as ``choose_core`` gave it) for one task;
    ``native`` where this process has no extension (an executor without it) falls back to Python."""
    spec = SnapshotEncoder(
        schema, cluster=cluster, published_at_ms=published_at_ms, max_rows=max_rows, max_bytes=max_bytes
    )
    if core == "native" and AVAILABLE == "native":
        return NativeSnapshotEncoder(spec)
    return spec


def chosen_core(config: CdcConfig) -> str:
    """``native`` or ``python`` for ``pipeline.core`` (auto: native where installed); a ConfigError when
    native is asked for and not installed."""
    requested = config.pipeline.core if config.pipeline is not None else "auto"
    return choose_core(requested, installed=AVAILABLE == "native", key="pipeline.core", source=config.source)


def core_words(core: str) -> str:
    """The job's words for the encoder that builds the events, and why it is the Python one when it is."""
    return core_description(core, installed=AVAILABLE == "native", key="pipeline.core")
