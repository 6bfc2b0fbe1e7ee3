"""The raw events of one partition merged into row images, with no Spark and no Kafka: replay's core.

Replay runs the workers' own merge (``state.partition_state.PartitionState.apply_prepared``, with the
workers' matching of bootstrap list elements, ``state.snapshot_lists``), which is idempotent and
commutative, so the raw topic can be read in any order and with every replica's copy: the events of a
partition are applied as they come and the live rows are read once, at one ``now`` for the whole job.
Raw events are read with the native core where it is installed (``pipeline.native_core``; odd bytes still
go to the Python reader). Images come out in the clean topics' JSON form
(``schemas.change_codec.json_value_row``), keyed by the primary key as ``cdc.verify.oracle.key_text``
keys them, so they compare directly with the clean topics' ``after`` images, with lake rows and with
Cassandra's rows.

TTLs: a row whose image changes by expiry shortly before ``now`` may or may not have reached the clean
topics yet (the workers' expiry timer runs every ``expiry_interval_ms``). ``settle_s`` names those rows
(``unsettled``) so a comparison can leave them out rather than report a difference that is only timing.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from cassandra_model.table_schema import TableSchema
from pipeline import native_core
from schemas.change_json import json_value_row
from schemas.driver_rows import key_text
from schemas.raw_event import RawEventError, is_snapshot_source, raw_event_reader
from state.change import expiry_changes
from state.partition_state import PartitionState, prepare_event
from state.row_image import RowImage, decode_row, partition_images
from state.snapshot_lists import adopt_snapshot_list_paths, drop_known_list_elements
from state.table_layout import layout_for


@dataclass(slots=True)
class ReplayedRow:
    """One live row: its key text, its JSON-form image and its newest visible write time (µs)."""

    key: str
    image: dict[str, Any]
    write_time_us: int | None

    def json(self) -> str:
        """The image as JSON text (what the lake job parses with ``json_struct``)."""
        return json.dumps(self.image, sort_keys=True, allow_nan=False)


@dataclass(slots=True)
class PartitionReplay:
    """What one partition's raw events merge into at ``now``.

    ``skipped`` counts events of another table id with the same name (a table dropped and created again):
    the workers dead-letter those, as their schema is gone, so replay leaves them out too; ``undecodable``
    counts record values that are not raw events (left out as well, with a count rather than a failure).
    """

    rows: list[ReplayedRow] = field(default_factory=list)
    unsettled: list[str] = field(default_factory=list)
    events: int = 0
    skipped: int = 0
    undecodable: int = 0


def key_columns(schema: TableSchema) -> list[str]:
    return [c.name for c in (*schema.partition_key, *schema.clustering)]


def image_key(schema: TableSchema, image: dict[str, Any]) -> str:
    """The key text of a JSON-form image (partition key and clustering columns, sorted JSON)."""
    return key_text({name: image[name] for name in key_columns(schema)})


def clean_key_text(schema: TableSchema, image: dict[str, Any]) -> str:
    """The primary key as the clean topics' Kafka key spells it (compact sorted JSON): a lake table's
    ``_cdc_key``."""
    key = {name: image[name] for name in key_columns(schema)}
    return json.dumps(key, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def json_image(schema: TableSchema, image: RowImage) -> dict[str, Any]:
    """A row image in the JSON form, exactly as a clean topic's ``after`` holds it."""
    return json.loads(json.dumps(json_value_row(schema, decode_row(image, schema)), allow_nan=False))


def merge_events(events: Iterable[dict[str, Any]], schema: TableSchema) -> tuple[PartitionState | None, int]:
    """A partition state with every event applied in the order given; None when there was none.

    List elements a bootstrap (snapshot) event and a commit-log event both bring are merged as one cell,
    as the workers merge them (``state.snapshot_lists``): a row written before the bootstrap read it
    reaches the raw topic both ways, under generated and under real cell paths."""
    layout = layout_for(schema)
    state: PartitionState | None = None
    count = 0
    for event in events:
        prepared = prepare_event(event, layout)
        if state is None:
            state = PartitionState(prepared.partition_key)
        if is_snapshot_source(event["source"]):
            drop_known_list_elements(state, prepared, layout)
        else:
            adopt_snapshot_list_paths(state, prepared, layout)
        state.apply_prepared(prepared, layout)
        count += 1
    return state, count


def replay_partition(
    events: Iterable[dict[str, Any]], schema: TableSchema, now_s: int, *, settle_s: int = 0
) -> PartitionReplay:
    """The live rows at ``now_s`` of the raw events of one partition (decoded, any order, duplicates
    allowed), and with ``settle_s`` the keys whose image an expiry changed in ``(now_s - settle_s, now_s]``."""
    table_id = str(schema.table_id)
    out = PartitionReplay()
    mine = []
    for event in events:
        if event["table_id"] != table_id:
            out.skipped += 1
            continue
        mine.append(event)
    state, out.events = merge_events(mine, schema)
    if state is None:
        return out
    for image in partition_images(state, schema, now_s):
        json_row = json_image(schema, image)
        out.rows.append(ReplayedRow(image_key(schema, json_row), json_row, image.write_time()))
    if settle_s > 0:
        for change in expiry_changes(state, schema, now_s - settle_s, now_s):
            shown = change.before if change.before is not None else change.after
            assert shown is not None  # an expiry change always has an image on one side
            out.unsettled.append(image_key(schema, json_image(schema, shown)))
    return out


#: the raw events' reader: the native core's where installed (``schemas.raw_event.raw_event_reader``)
_read_event = raw_event_reader(native_core.decode_raw_event)


def replay_encoded(
    values: Iterable[bytes], schema: TableSchema, now_s: int, *, settle_s: int = 0
) -> PartitionReplay:
    """``replay_partition`` of Avro-encoded raw events (the raw topic's record values)."""
    events = []
    bad = 0
    for value in values:
        try:
            events.append(_read_event(value))
        except RawEventError:
            bad += 1
    out = replay_partition(events, schema, now_s, settle_s=settle_s)
    out.undecodable = bad
    return out
