"""The `cdc verify` workload generator: deterministic for a seed, and covering what it promises to cover."""

from __future__ import annotations

import collections
import hashlib
import os
import re
import subprocess
import sys
from typing import Any

import pytest
from cassandra.encoder import Encoder
from cassandra.query import bind_params

from cdc.verify.workload.cell_write import DELETE, DELTA, LIVENESS, MODES, REMOVE
from cdc.verify.workload.operation import KINDS, ONE, QUORUM, Operation, Phase
from cdc.verify.workload.random_values import Udt
from cdc.verify.workload.seeded_workload import Workload

BASE = 1_700_000_000_000_000
NATIVE_TYPES = (
    "ascii",
    "bigint",
    "blob",
    "boolean",
    "date",
    "decimal",
    "double",
    "duration",
    "float",
    "inet",
    "int",
    "smallint",
    "text",
    "time",
    "timestamp",
    "timeuuid",
    "tinyint",
    "uuid",
    "varint",
)


def run(seed: int = 11, operations: int = 2000, keyspace: str = "ks") -> list[Phase]:
    return Workload(keyspace, seed, base_time_us=BASE, ttl_range_s=(3, 30)).phases(operations)


def flat(phases: list[Phase]) -> list[Operation]:
    return [op for phase in phases for op in phase.operations]


@pytest.fixture(scope="module")
def ops() -> list[Operation]:
    return flat(run())


def canonical(value: Any) -> Any:
    """Sets compare equal whatever their order, but their repr depends on the process's hash seed."""
    if isinstance(value, set | frozenset):
        return sorted(repr(canonical(v)) for v in value)
    if isinstance(value, dict):
        return [(canonical(k), canonical(v)) for k, v in value.items()]
    if isinstance(value, list | tuple):
        return [canonical(v) for v in value]
    return value


def digest(operations: list[Operation]) -> str:
    text = repr(
        [(o.kind, o.table, o.cql, canonical(o.params), o.timestamp, o.partition, o.ttl) for o in operations]
    )
    return hashlib.sha256(text.encode()).hexdigest()


def test_same_seed_same_operations_different_seed_different(ops: list[Operation]) -> None:
    assert flat(run()) == ops
    assert flat(run(seed=12)) != ops
    assert [op.cql for op in flat(run(seed=12))] != [op.cql for op in ops]


def test_same_seed_same_operations_in_another_process() -> None:
    """String hashing differs between processes; nothing the generator decides may depend on it."""
    code = (
        "from tests.unit.test_verify_workload import digest, flat, run; "
        "print(digest(flat(run(operations=600))))"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": hash_seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for hash_seed in ("1", "2")
    }
    assert outputs == {digest(flat(run(operations=600)))}


def test_every_kind_appears(ops: list[Operation]) -> None:
    counts = collections.Counter(op.kind for op in ops)
    assert len(ops) == 2000
    assert set(counts) == set(KINDS), f"missing {set(KINDS) - set(counts)}"
    assert all(counts[kind] >= 10 for kind in KINDS), counts


def test_statements_are_well_formed(ops: list[Operation]) -> None:
    encoder = Encoder()
    for op in ops:
        assert op.cql.count("%s") == len(op.params), op
        assert "%" not in op.cql.replace("%s", ""), op
        bind_params(op.cql, op.params, encoder)  # the driver can render every value
        assert op.cql.split()[0] in ("INSERT", "UPDATE", "DELETE", "BEGIN"), op
        assert "ks." in op.cql and op.table


def test_timestamps_ttl_and_lwt(ops: list[Operation]) -> None:
    for op in ops:
        if op.kind.startswith("lwt") or op.kind == "counter":
            assert op.timestamp is None and "USING" not in op.cql and op.ttl is None, op
        else:
            assert op.timestamp is not None and op.params.count(op.timestamp) >= 1, op
            assert op.cql.count("TIMESTAMP %s") == 1, op
        if op.kind.startswith("lwt"):
            assert op.cql.endswith(("IF NOT EXISTS", "IF name = %s")), op
        if op.ttl is not None:
            assert 3 <= op.ttl <= 30 and "TTL %s" in op.cql, op
    ttl = sum(op.kind in ("insert_ttl", "update_ttl") for op in ops)
    plain = sum(op.kind in ("insert", "update") for op in ops)
    assert 0.05 < ttl / (ttl + plain) < 0.16


def test_out_of_order_and_colliding_timestamps(ops: list[Operation]) -> None:
    stamped = [op for op in ops if op.timestamp is not None]
    seen: dict[int, list[Operation]] = collections.defaultdict(list)
    newest = 0
    older = collisions = 0
    for index, op in enumerate(ops):
        assert op.timestamp is None or op.timestamp <= BASE + index
        if op.timestamp is None:
            continue
        earlier = seen[op.timestamp]
        if any(e.table == op.table and e.partition == op.partition for e in earlier):
            collisions += 1
        elif op.timestamp < newest:
            older += 1
        newest = max(newest, op.timestamp)
        earlier.append(op)
    assert 0.06 < older / len(stamped) < 0.14, older
    assert collisions >= 0.02 * len(ops), collisions


def test_collisions_write_a_different_value_to_the_same_cells(ops: list[Operation]) -> None:
    """A collision repeats the row of an earlier UPDATE at its timestamp and sets other values."""
    simple_update = re.compile(
        r"UPDATE \S+ USING TIMESTAMP %s(?: AND TTL %s)? SET ((?:\w+ = %s(?:, )?)+) WHERE (.*)"
    )
    earlier: dict[tuple[int, str], dict[str, Any]] = {}
    differing = 0
    for op in ops:
        match = simple_update.fullmatch(op.cql)
        if match is None:
            continue
        columns = re.findall(r"(\w+) = %s", match[1])
        key_count = match[2].count("%s")
        values = dict(zip(columns, op.params[-len(columns) - key_count : -key_count], strict=True))
        row = (op.timestamp, repr(op.params[-key_count:]))
        if row in earlier:
            differing += any(values[c] != earlier[row][c] for c in set(values) & set(earlier[row]))
        earlier[row] = values
    assert differing >= 10, differing


def test_schema_changes_between_phases() -> None:
    phases = run()
    assert [len(p.operations) for p in phases] == [666, 667, 627, 40]
    assert phases[0].schema_change_after == ["ALTER TABLE ks.kv ADD extra int"]
    assert phases[1].schema_change_after == ["ALTER TABLE ks.kv DROP note"]
    assert phases[2].schema_change_after == phases[3].schema_change_after == []
    assert [p.after_faults for p in phases] == [False, False, False, True]
    note, extra = re.compile(r"\bnote\b"), re.compile(r"\bextra\b")
    assert not any(extra.search(op.cql) for op in phases[0].operations)
    assert any(note.search(op.cql) for op in phases[0].operations + phases[1].operations)
    assert any(extra.search(op.cql) for op in phases[1].operations + phases[2].operations)
    assert not any(note.search(op.cql) for op in phases[2].operations + phases[3].operations)


def test_setup_covers_every_type_and_table() -> None:
    workload = Workload("ks", 1, replication_factor=3, base_time_us=BASE)
    ddl = "\n".join(workload.setup_statements())
    assert "'replication_factor': 3" in ddl
    assert all(s.startswith("CREATE") and "IF NOT EXISTS" in s for s in workload.setup_statements())
    for cql_type in NATIVE_TYPES:
        assert re.search(rf"\bc_{cql_type} {cql_type}\b", ddl), cql_type
    for composite in ("tuple<", "frozen<list<int>>", "map<text, frozen<set<int>>>", "vector<float, 3>"):
        assert composite in ddl
    assert ddl.count("WITH cdc = true") + ddl.count("AND cdc = true") == len(workload.tables()) == 5
    assert "STATIC" in ddl and "ck2 DESC" in ddl and "frozen<point>" in ddl and "addr address" in ddl


def test_range_deletes_and_batches(ops: list[Operation]) -> None:
    ranges = " ".join(op.cql for op in ops if op.kind == "delete_range")
    for bound in (
        "ck1 > %s",
        "ck1 >= %s",
        "ck1 < %s",
        "ck1 <= %s",
        "ck2 > %s",
        "ck2 >= %s",
        "ck2 < %s",
        "ck2 <= %s",
    ):
        assert bound in ranges, bound
    batches = [op for op in ops if op.kind == "batch"]
    assert all(op.cql.startswith("BEGIN BATCH USING TIMESTAMP %s") for op in batches)
    sizes = {op.cql.count(";") for op in batches}
    assert sizes <= {2, 3, 4} and len(sizes) == 3
    assert any("," in op.table for op in batches)


def test_udt_literal() -> None:
    value = Udt((("street", "O'Neil"), ("zip", None), ("phones", ("1", "2"))))
    assert bind_params("%s", (value,), Encoder()) == "{street: 'O''Neil', zip: NULL, phones: ['1', '2']}"


def test_rejects_a_bad_keyspace_name() -> None:
    with pytest.raises(ValueError, match="keyspace"):
        Workload("ks; DROP", 1, base_time_us=BASE)


def test_every_operation_records_what_it_writes(ops: list[Operation]) -> None:
    """The verifier explains each image with these records: they must name what the CQL names."""
    for op in ops:
        assert op.writes, op
        tables = set(op.table.split(","))
        for write in op.writes:
            assert write.table in tables, (op, write)
            assert write.mode in MODES
            if write.column is not None:
                assert re.search(rf"\b{write.column}\b", op.cql), (op.cql, write)
            for name, _value in write.key:
                assert re.search(rf"\b{name}\b", op.cql), (op.cql, write)
            if write.mode in (DELETE, REMOVE, DELTA) or op.ttl is None:
                assert write.ttl is None, (op, write)
            else:
                assert write.ttl is None or write.ttl <= op.ttl, (op, write)
        if op.kind == "counter":
            assert len(op.writes) == op.cql.count("%s") - 2 and {w.mode for w in op.writes} == {DELTA}
        if op.kind == "insert":
            assert any(w.mode == LIVENESS for w in op.writes) or "(tenant, bucket, s" in op.cql, op
        if op.kind.startswith("delete_") and op.kind != "delete_cells":
            assert [(w.mode, w.column) for w in op.writes] == [(DELETE, None)], op


def test_static_cells_are_recorded_against_the_partition(ops: list[Operation]) -> None:
    statics = [w for op in ops for w in op.writes if w.table == "wide" and w.column in ("s", "s_tags")]
    assert statics and all([name for name, _ in w.key] == ["tenant", "bucket"] for w in statics)


def test_part_of_the_workload_is_written_at_consistency_one(ops: list[Operation]) -> None:
    lwt = [op for op in ops if op.kind.startswith("lwt")]
    others = [op for op in ops if not op.kind.startswith("lwt")]
    assert lwt and {op.consistency for op in lwt} == {QUORUM}
    share = sum(op.consistency == ONE for op in others) / len(others)
    assert 0.18 < share < 0.32, share
    assert {op.consistency for op in others} == {ONE, QUORUM}


def test_the_final_stretch_runs_after_the_faults_with_the_longest_ttls() -> None:
    phases = run()
    final = phases[-1]
    assert final.after_faults and not any(p.after_faults for p in phases[:-1])
    inserts = [op for op in final.operations if op.kind.startswith("insert")]
    assert inserts and all(op.kind == "insert_ttl" and op.ttl == 30 for op in inserts)
    assert all(op.ttl in (None, 30) for op in final.operations if op.kind != "update")
    assert [len(p.operations) for p in run(operations=60)][-1] == 20  # no final stretch below 100 ops
    assert len(run(operations=60)) == 3


def test_every_write_of_a_long_workload_takes_its_json_form() -> None:
    """Each written value converts to the clean topics' form (a value the conversion refused would stop
    the verifier at the end of a long run)."""
    from cdc.verify.ledger_index import LedgerIndex
    from cdc.verify.write_ledger import WriteLedger
    from tests.unit.test_verify_image_audit import SCHEMAS

    ledger = WriteLedger()
    for op in flat(run(seed=5, operations=3000)):
        ledger.record(op, sent_us=0, done_us=1, attempts=1, acknowledged=True)
    index = LedgerIndex(ledger.issued(), SCHEMAS)
    assert not index.unknown_tables
    columns = {c for scope in index.scopes.values() for c in scope.elements}
    assert {
        "name",
        "tags",
        "addr",
        "attrs",
        "items",
        "loc",
        "note",
        "extra",
        "s",
        "s_tags",
        "vals",
        "v1",
    } <= columns
    assert {"c_map", "c_tuple", "c_vector", "c_duration", "n", "m", ""} <= columns
