"""Row comparison for reconcile and replay --compare: differing columns, float precision, the tally."""

from __future__ import annotations

import pickle

from cassandra_model.ddl_parser import load_schema_from_cql
from pipeline.lake_schema import normalize_json_form
from pipeline.row_diff import TableDiff, differing_columns

SCHEMA = load_schema_from_cql(
    "CREATE TABLE ks.t (pk int, ck int, f float, d double, fl list<float>, tp tuple<int, float>, "
    "m map<int, float>, v text, PRIMARY KEY (pk, ck)) WITH ID = 00000000-0000-0000-0000-00000000000a;"
).by_name("ks", "t")
assert SCHEMA is not None

F32_1_1 = 1.100000023841858  # float32(1.1) widened to a double: what Cassandra and the commit log give


def _row(**values: object) -> dict[str, object]:
    return normalize_json_form(SCHEMA, {"pk": 1, "ck": 1, **values})


def test_equal_rows_have_no_differing_columns() -> None:
    row = _row(f=F32_1_1, d=0.1, fl=[F32_1_1], tp=[1, F32_1_1], m=[[1, F32_1_1]], v="x")
    assert differing_columns(SCHEMA, row, dict(row)) == []


def test_a_lake_float_read_back_as_its_shortest_decimal_is_the_same_float() -> None:
    cassandra = _row(f=F32_1_1, fl=[F32_1_1, 2.5], tp="[1, 1.100000023841858]", m="[[1, 1.100000023841858]]")
    lake = _row(f=1.1, fl=[1.1, 2.5], tp="[1, 1.1]", m="[[1, 1.1]]")
    assert differing_columns(SCHEMA, cassandra, lake) == []
    assert differing_columns(
        SCHEMA, cassandra, _row(f=1.2, fl=[1.1, 2.5], tp="[1, 1.1]", m="[[1, 1.1]]")
    ) == ["f"]


def test_doubles_compare_exactly_and_nulls_count() -> None:
    assert differing_columns(SCHEMA, _row(d=0.1), _row(d=0.1 + 1e-12)) == ["d"]
    assert differing_columns(SCHEMA, _row(v="x"), _row()) == ["v"]
    assert differing_columns(SCHEMA, _row(d=float("nan")), _row(d="NaN")) == []


def test_lake_bookkeeping_columns_are_ignored() -> None:
    assert differing_columns(SCHEMA, _row(v="x"), {**_row(v="x"), "_cdc_op": "u", "_cdc_offset": 3}) == []


def test_table_diff_counts_and_keeps_the_smallest_example_keys() -> None:
    parts = [TableDiff("ks.t", limit=3), TableDiff("ks.t", limit=3)]
    for i in range(10):
        part = parts[i % 2]
        key = f'{{"ck": 1, "pk": {i}}}'
        if i < 4:
            part.add(SCHEMA, key, _row(v="x"), None)  # missing
        elif i < 6:
            part.add(SCHEMA, key, None, _row(v="x"))  # extra
        elif i < 8:
            part.add(SCHEMA, key, _row(v="x", d=1.0), _row(v="y", d=1.0))  # different
        else:
            part.add(SCHEMA, key, _row(v="x"), _row(v="x"))  # same
    parts[1].skip("k")
    total = pickle.loads(pickle.dumps(parts[0])).merge(pickle.loads(pickle.dumps(parts[1])))
    assert (total.expected_rows, total.actual_rows) == (8, 6)
    assert (total.missing, total.extra, total.different, total.skipped) == (4, 2, 2, 1)
    assert total.missing_keys == ['{"ck": 1, "pk": 0}', '{"ck": 1, "pk": 1}', '{"ck": 1, "pk": 2}']
    assert [d["key"] for d in total.different_keys] == ['{"ck": 1, "pk": 6}', '{"ck": 1, "pk": 7}']
    assert total.different_keys[0]["columns"] == ["v"]
    assert total.columns == {"v": 2}
    assert not total.clean
    report = total.as_dict("cassandra", "lake")
    assert report["missing_in_lake"] == 4 and report["extra_in_lake"] == 2
    assert report["examples"]["extra_in_lake"] == ['{"ck": 1, "pk": 4}', '{"ck": 1, "pk": 5}']
    assert "missing in lake" in total.describe("cassandra", "lake")


def test_an_empty_tally_is_clean() -> None:
    diff = TableDiff("ks.t")
    diff.add(SCHEMA, "k", _row(v="x"), _row(v="x"))
    assert diff.clean and diff.describe().endswith(": same")
