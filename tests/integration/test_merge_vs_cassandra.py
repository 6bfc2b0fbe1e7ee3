"""The merge core against a real Cassandra: every case of merge_cases.py run as CQL, then SELECT.

The pure tests check the state against rows written by hand; here Cassandra says what the rows are. Each
case's statements run on node 1 (one partition per case, one table per schema shape), the tables are read
at consistency ALL right after the writes and again once every TTL has run out (with WRITETIME and TTL),
and then:

- the raw events the event builder makes for the same writes are merged, in order and in shuffled orders
  with duplicates, and ``partition_images`` + ``decode_row`` must show exactly what SELECT showed;
- the raw events of the mutations Cassandra logged for those statements (the tables have cdc on, so node
  1's cdc_raw holds them) are merged the same way: this checks decoder and merge together;
- the hand-written rows of the case must be what Cassandra showed, so the pure table cannot drift from
  Cassandra either.

Times: writes carry the case's USING TIMESTAMP; list element names and TTL expiry come from the node's
clock, so the model takes the wall clock of each statement (node and test share the host clock) and
every read is evaluated at the second it ran in (a read straddling a second is retried).
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from cassandra import ConsistencyLevel

from agents.cdc_raw import list_cdc_segments
from agents.commitlog.log_reader import decode_segment
from cassandra_model.cql_types import UserType
from cassandra_model.digest import update_digest
from cassandra_model.schema_cql import table_to_cql
from cassandra_model.system_schema import load_schema_from_session
from cassandra_model.table_schema import SchemaCatalog, TableSchema
from infra.cassandra import CassandraNode
from schemas.raw_event import decode_raw_event, encode_raw_event, raw_event_record
from state.partition_state import PartitionState
from state.row_image import RowImage, cell_metadata, decode_row, partition_images
from testkit.event_builder import NOW, EventBuilder
from tests.integration.agent_harness import cql_session
from tests.unit.state.merge_cases import CASES, Case, EventMaker, Op, table, ttl_of, with_key
from tests.unit.state.support import shuffled_with_duplicates

KEYSPACE = "merge_oracle"
ORACLE_CASES = [c for c in CASES if c.runs_as_cql]
SENTINEL_KEY = 1_000_000  # a kv partition written last: once it is logged, every case's writes are too
SHUFFLES = 3

#: cases where the state disagrees with Cassandra (bugs in state/): case name -> what differs
KNOWN_DISAGREEMENTS: dict[str, str] = {}


# ---------------------------------------------------------------------------------------------------------
# what Cassandra showed


@dataclass
class Read:
    """One SELECT of a case's partition: its rows and, per row, WRITETIME/TTL of every column."""

    now_s: int
    rows: list[dict[str, Any]]
    meta: list[dict[str, Any]]


@dataclass
class Run:
    """A case as it ran on the node: its partition, the operations with the node's times, the reads."""

    case: Case
    schema: TableSchema
    key: int
    ops: list[Op]
    nows: list[int] = field(default_factory=list)
    clocks: list[int] = field(default_factory=list)
    reads: list[Read] = field(default_factory=list)
    logged: list[dict[str, Any]] = field(default_factory=list)  # raw events from the commit log

    def model_events(self) -> list[dict[str, Any]]:
        maker = EventMaker(self.schema)
        out: list[dict[str, Any]] = []
        for op, now, clock in zip(self.ops, self.nows, self.clocks, strict=True):
            out += maker.events(op, now=now, clock_micros=clock)
        return out


@dataclass
class Oracle:
    runs: dict[str, Run]
    schemas: dict[str, TableSchema]


def plain(value: Any) -> Any:
    """A value as comparable Python data: UDTs as dicts, maps as dicts, sets/lists/tuples as lists."""
    if hasattr(value, "_asdict"):
        return {k: plain(v) for k, v in value._asdict().items()}
    if isinstance(value, Mapping):
        return {plain(k): plain(v) for k, v in value.items()}
    if isinstance(value, str | bytes):
        return value
    if hasattr(value, "__iter__"):
        return [plain(v) for v in value]
    return value


def _columns(schema: TableSchema) -> tuple[list[str], list[str], list[str]]:
    """Every column; those WRITETIME is selected for; those TTL is (simple ones).

    Not counters (CQL refuses), nor non-frozen UDTs and TTL of collections: Cassandra returns a list with
    nulls for them, which the driver cannot decode.
    """
    keys = [c.name for c in (*schema.partition_key, *schema.clustering)]
    values = [*schema.static_columns.values(), *schema.regular_columns.values()]
    timed = [
        c
        for c in values
        if c.type.cql() != "counter" and not (isinstance(c.type, UserType) and c.type.multi_cell)
    ]
    return (
        keys + [c.name for c in values],
        [c.name for c in timed],
        [c.name for c in timed if not c.type.multi_cell],
    )


def _select(session: Any, schema: TableSchema) -> tuple[int, dict[int, Read]]:
    """The whole table at consistency ALL within one second of the node's clock, by partition key."""
    names, timed, ttls = _columns(schema)
    selectors = names + [f"writetime({n})" for n in timed] + [f"ttl({n})" for n in ttls]
    statement = f"SELECT {', '.join(selectors)} FROM {schema.name}"
    while True:
        before = time.time()
        if before % 1 > 0.9:
            time.sleep(1.01 - before % 1)
            continue
        result = list(session.execute(statement))
        after = time.time()
        if int(before) == int(after):
            break
    now_s = int(before)
    reads: dict[int, Read] = {}
    pk = schema.partition_key[0].name
    for values in result:
        got = dict(zip(selectors, values, strict=True))
        read = reads.setdefault(got[pk], Read(now_s, [], []))
        read.rows.append({n: plain(got[n]) for n in names})
        read.meta.append(
            {n: {"writetime": got[f"writetime({n})"], "ttl": got.get(f"ttl({n})")} for n in timed}
        )
    return now_s, reads


# ---------------------------------------------------------------------------------------------------------
# running the cases


def _create_tables(session: Any, names: list[str]) -> None:
    """The cases' tables in KEYSPACE with cdc on: the unit schemas rendered as DDL, without their ids."""
    done: set[str] = set()
    for name in names:
        ddl = table_to_cql(replace(table(name), keyspace=KEYSPACE, cdc=True))
        for statement in ddl.split(";\n"):
            statement = re.sub(r"\bID = [0-9a-f-]{36} AND ", "", statement.strip())  # the ID is never last
            if statement and statement not in done:
                done.add(statement)
                session.execute(statement, timeout=60)


def _wait_for_quiet_second(fraction: float = 0.7) -> None:
    """Start TTL'd writes early in a second, so a case's writes share one node second."""
    if time.time() % 1 > fraction:
        time.sleep(1.01 - time.time() % 1)


def _run_case(session: Any, run: Run) -> None:
    if run.case.ttl:
        _wait_for_quiet_second()
    for i, op in enumerate(run.ops):
        cql = op.cql(run.schema)
        if run.schema.is_counter:
            cql = re.sub(r" USING TIMESTAMP \d+", "", cql)  # counters take the node's timestamps
        before = time.time()
        try:
            session.execute(cql)
        except Exception as exc:
            raise AssertionError(f"{run.case.name}: {cql}: {exc}") from exc
        after = time.time()
        if ttl_of(op):
            assert int(before) == int(after), f"{run.case.name}: a TTL'd write straddled a second"
        if run.schema.is_counter:
            run.ops[i] = replace(op, ts=int(after * 1e6))
        run.nows.append(int(before))
        run.clocks.append(int(after * 1e6))


def _durable_offsets(node: CassandraNode) -> dict[str, int]:
    return {
        s.path.name: s.index.offset
        for s in list_cdc_segments(node.spec.cdc_raw)
        if s.index is not None and not s.index.completed
    }


def _logged_events(
    node: CassandraNode, catalog: SchemaCatalog, starts: dict[str, int], sentinel: bytes
) -> dict[tuple[str, bytes], list[dict[str, Any]]]:
    """Raw events of KEYSPACE's updates logged since ``starts``, by (table, partition key), in log order;
    polls until the sentinel partition is durable."""
    table_ids = {t.table_id for t in catalog.tables() if t.keyspace == KEYSPACE}
    deadline = time.monotonic() + 30
    while True:
        out: dict[tuple[str, bytes], list[dict[str, Any]]] = {}
        for segment in list_cdc_segments(node.spec.cdc_raw):
            if segment.index is None:
                continue
            updates, decoder = decode_segment(
                segment.path,
                catalog,
                start=starts.get(segment.path.name, 0),
                limit=segment.index.read_limit,
                completed=segment.index.completed,
            )
            assert not decoder.damage and not decoder.stats.decode_errors, (
                f"{segment.path.name}: {decoder.damage} {decoder.stats.decode_errors[:3]}"
            )
            for update in updates:
                if update.table_id not in table_ids:
                    continue
                record = raw_event_record(
                    update,
                    cluster="oracle",
                    node=node.spec.name,
                    segment_id=segment.name.segment_id,
                    descriptor_version=decoder.descriptor.version if decoder.descriptor else 0,
                    digest=update_digest(update),
                    published_at_ms=0,
                )
                event = decode_raw_event(encode_raw_event(record))
                out.setdefault((update.table, update.partition_key), []).append(event)
        if ("kv", sentinel) in out:
            return out
        assert time.monotonic() < deadline, "the sentinel write never became durable in cdc_raw"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def oracle(cassandra_node: CassandraNode) -> Iterator[Oracle]:
    """Every case run on node 1, read twice, and its logged mutations decoded."""
    names = sorted({c.table for c in ORACLE_CASES} | {"kv"})
    with cql_session(
        cassandra_node.spec.address, cassandra_node.spec.cql_port, consistency=ConsistencyLevel.ALL
    ) as session:
        # node 1 may have grown into the three-node cluster: keep every replica on it
        nodes = 1 + len(list(session.execute("SELECT peer FROM system.peers")))
        session.execute(f"DROP KEYSPACE IF EXISTS {KEYSPACE}", timeout=60)
        session.execute(
            f"CREATE KEYSPACE {KEYSPACE} WITH replication = "
            f"{{'class': 'SimpleStrategy', 'replication_factor': {nodes}}}",
            timeout=60,
        )
        _create_tables(session, names)
        catalog = load_schema_from_session(session, [KEYSPACE])
        schemas = {n: catalog.by_name(KEYSPACE, n) for n in names}
        starts = _durable_offsets(cassandra_node)

        runs: dict[str, Run] = {}
        keys: dict[str, int] = {}
        for case in ORACLE_CASES:
            key = keys[case.table] = keys.get(case.table, 0) + 1
            schema = schemas[case.table]
            run = Run(case, schema, key, [with_key(op, key) for op in case.ops])
            _run_case(session, run)
            runs[case.name] = run
        session.execute(f"INSERT INTO {KEYSPACE}.kv (pk, ck, v) VALUES ({SENTINEL_KEY}, 0, 0)")

        expiry = max((n + ttl_of(op) for r in runs.values() for op, n in zip(r.ops, r.nows, strict=True)))
        for attempt in range(2):
            if attempt:  # again once every TTL has run out
                time.sleep(max(0.0, expiry - time.time()) + 0.05)
            for name in names:
                now_s, reads = _select(session, schemas[name])
                for run in runs.values():
                    if run.case.table == name:
                        run.reads.append(reads.get(run.key, Read(now_s, [], [])))

    sentinel = EventBuilder(schemas["kv"]).partition_key(SENTINEL_KEY)
    logged = _logged_events(cassandra_node, catalog, starts, sentinel)
    for run in runs.values():
        run.logged = logged.get((run.case.table, EventBuilder(run.schema).partition_key(run.key)), [])
    yield Oracle(runs, schemas)


# ---------------------------------------------------------------------------------------------------------
# comparing


def _meta(image: RowImage, timed: list[str], ttls: list[str], now_s: int) -> dict[str, Any]:
    info = cell_metadata(image, now_s)
    out: dict[str, Any] = {}
    for name in timed:
        cell = info.get(name)
        if cell is None:
            out[name] = {"writetime": None, "ttl": None}
        elif isinstance(cell, list):
            out[name] = {"writetime": [e["writetime"] for e in cell], "ttl": None}
        else:
            out[name] = {
                "writetime": cell["writetime"],
                "ttl": cell["remaining_ttl"] if name in ttls else None,
            }
    return out


def _differences(state: PartitionState, run: Run, what: str) -> list[str]:
    """How the state's images differ from each read of the case (empty: none)."""
    _, timed, ttls = _columns(run.schema)
    out = []
    for i, read in enumerate(run.reads):
        images = partition_images(state, run.schema, read.now_s)
        rows = [{k: plain(v) for k, v in decode_row(image, run.schema).items()} for image in images]
        meta = [_meta(image, timed, ttls, read.now_s) for image in images]
        where = f"{what}, read {i + 1} (node second {read.now_s}, writes at {sorted(set(run.nows))})"
        if rows != read.rows:
            out.append(f"{where}: Cassandra rows {read.rows}\n  state rows {rows}")
        elif meta != read.meta:
            out.append(f"{where}: Cassandra WRITETIME/TTL {read.meta}\n  state {meta}")
    return out


def _merge(events: list[dict[str, Any]], schema: TableSchema) -> PartitionState:
    state = PartitionState(events[0]["partition_key"])
    for event in events:
        state.apply(event, schema)
    return state


def _check_orders(events: list[dict[str, Any]], run: Run, source: str) -> None:
    assert events, f"no {source} events"
    problems = _differences(_merge(events, run.schema), run, f"{source} events in order")
    rng = random.Random(run.case.name)
    for n in range(SHUFFLES):
        problems += _differences(
            _merge(shuffled_with_duplicates(events, rng), run.schema),
            run,
            f"{source} events, shuffle {n + 1}",
        )
    assert not problems, "\n".join(problems)


def _params() -> list[Any]:
    out = []
    for case in ORACLE_CASES:
        marks = []
        if case.name in KNOWN_DISAGREEMENTS:
            marks.append(pytest.mark.xfail(strict=True, reason=KNOWN_DISAGREEMENTS[case.name]))
        out.append(pytest.param(case.name, marks=marks, id=case.name))
    return out


def _describe(schema: TableSchema) -> dict[str, Any]:
    return {
        "columns": [(c.name, c.kind, c.type.cql(), c.clustering_order) for c in schema.all_columns()],
        "dropped": sorted((d.name, d.type.cql(), d.dropped_time) for d in schema.dropped_columns.values()),
        "counter": schema.is_counter,
    }


# ---------------------------------------------------------------------------------------------------------
# the tests


def test_tables_have_the_unit_schemas(oracle: Oracle) -> None:
    """The tables created from the cases' schemas load back the same, so both sides mean one table."""
    for name, loaded in oracle.schemas.items():
        assert _describe(loaded) == _describe(table(name)), name
        assert loaded.cdc, f"{name}: cdc is off, its mutations would not reach cdc_raw"


@pytest.mark.parametrize("name", _params())
def test_model_events_merge_to_what_cassandra_shows(oracle: Oracle, name: str) -> None:
    """The event builder's events for the case's statements, merged in any order, read as SELECT."""
    run = oracle.runs[name]
    _check_orders(run.model_events(), run, "model")


@pytest.mark.parametrize("name", _params())
def test_logged_events_merge_to_what_cassandra_shows(oracle: Oracle, name: str) -> None:
    """The mutations Cassandra logged for the case, decoded and merged in any order, read as SELECT."""
    run = oracle.runs[name]
    assert len(run.logged) == len(run.ops), (
        f"{len(run.logged)} logged updates of partition {run.key} for {len(run.ops)} statements"
    )
    _check_orders(run.logged, run, "logged")


@pytest.mark.parametrize(
    "case", [c for c in ORACLE_CASES if c.oracle_rows and not c.ops_at], ids=lambda c: c.name
)
def test_hand_written_rows_are_what_cassandra_shows(oracle: Oracle, case: Case) -> None:
    """The rows the pure tests expect are Cassandra's, at the same time after the writes."""
    run = oracle.runs[case.name]
    if case.ttl:
        assert len(set(run.nows)) == 1, f"the writes spanned seconds {run.nows}: read times are ambiguous"
    checked = 0
    for read in run.reads:
        at = NOW + read.now_s - run.nows[0]
        if not any(t <= at for t in case.reads()):
            continue
        expected = [{k: plain(v) for k, v in r.items()} for r in case.rows_at(at)]
        shown = [{k: v for k, v in {**r, "pk": 1}.items() if v is not None} for r in read.rows]
        assert shown == expected, f"at NOW+{at - NOW}: Cassandra shows {shown}, the case expects {expected}"
        checked += 1
    assert checked, "no read to compare"
