"""`cdc segment dump` on real segments written by Cassandra 4.0 (the upstream fixtures)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agents.commitlog.log_reader import decode_segment
from cassandra_model.ddl_parser import load_schema_from_cql
from cassandra_model.digest import upstream_hash
from cdc.cli import main
from tests.dump_contract import CELL_KEYS, ROW_KEYS, UPDATE_KEYS
from tests.unit.legacy_fixtures import read_hash_txt, standard1_cql


@pytest.fixture
def fixture_40(legacy_commitlog_dir: Path, tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    folder = legacy_commitlog_dir / "4.0.11-encrypted"
    expected = read_hash_txt(folder)
    schema = tmp_path / "schema.cql"
    schema.write_text(standard1_cql(expected["cfid"]))
    return folder, schema, expected


def test_dump_prints_one_json_object_per_update(fixture_40, capsys: pytest.CaptureFixture[str]) -> None:
    folder, schema, expected = fixture_40
    assert main(["segment", "dump", str(folder), "--schema-cql", str(schema)]) == 0
    out, err = capsys.readouterr()
    objects = [json.loads(line) for line in out.splitlines()]
    cells = [cell for o in objects for row in o["rows"] for cell in row["cells"]]
    assert len(cells) == int(expected["cells"])
    for o in objects:
        assert o.keys() >= UPDATE_KEYS
        assert o["table_id"] == expected["cfid"]
        assert o["position"]["segment"].startswith("CommitLog-7-")
        for row in o["rows"]:
            assert row.keys() >= ROW_KEYS and isinstance(row["clustering"], list)
            for cell in row["cells"]:
                assert cell.keys() >= CELL_KEYS
                assert bytes.fromhex(cell["raw"]).hex() == cell["raw"]
    # The dumped raw values reproduce the upstream test's hash: nothing was lost or altered on the way.
    catalog = load_schema_from_cql(schema)
    updates, _ = decode_segment(next(folder.glob("*.log")), catalog, completed=True)
    assert upstream_hash(updates)[1] == int(expected["hash"])
    raw_in_dump = [bytes.fromhex(c["raw"]) for c in cells]
    assert raw_in_dump == [c.raw for u in updates for r in u.rows for c in r.cells]
    # Mutations of tables outside the schema are reported on stderr, as JSON, without failing.
    reports = [json.loads(line) for line in err.splitlines()]
    assert any(r.get("unknown_tables") for r in reports)


def test_from_and_to_bound_the_read(fixture_40, capsys: pytest.CaptureFixture[str]) -> None:
    folder, schema, _ = fixture_40
    segment = next(folder.glob("*.log"))
    assert main(["segment", "dump", str(segment), "--schema-cql", str(schema), "--to", "5000"]) == 0
    out, err = capsys.readouterr()
    first = [json.loads(line) for line in out.splitlines()]
    assert first and all(o["position"]["position"] <= 5000 for o in first)
    resume = next(json.loads(line) for line in err.splitlines() if "resume_position" in line)[
        "resume_position"
    ]
    assert main(["segment", "dump", str(segment), "--schema-cql", str(schema), "--from", str(resume)]) == 0
    rest = [json.loads(line) for line in capsys.readouterr()[0].splitlines()]
    assert main(["segment", "dump", str(segment), "--schema-cql", str(schema)]) == 0
    whole = [json.loads(line) for line in capsys.readouterr()[0].splitlines()]
    assert first + rest == whole


def test_unreadable_segments_are_reported_as_json_errors(
    legacy_commitlog_dir: Path, fixture_40, capsys: pytest.CaptureFixture[str]
) -> None:
    _, schema, _ = fixture_40
    encrypted = legacy_commitlog_dir / "3.4-encrypted"
    assert main(["segment", "dump", str(encrypted), "--schema-cql", str(schema)]) == 1
    errors = [json.loads(line) for line in capsys.readouterr()[1].splitlines()]
    assert {e["segment"] for e in errors} == {p.name for p in encrypted.glob("*.log")}
    assert all(e["level"] == "error" and e["offset"] == 0 and "encrypted" in e["reason"] for e in errors)


def test_damaged_segment_reports_offset_and_goes_on(
    legacy_commitlog_dir: Path, fixture_40, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, schema, _ = fixture_40
    original = next(folder.glob("*.log"))
    damaged = tmp_path / original.name
    data = bytearray(original.read_bytes())
    catalog = load_schema_from_cql(schema)
    updates, _ = decode_segment(original, catalog, completed=True)
    victim = updates[len(updates) // 2]
    data[victim.offset + 12] ^= 0xFF  # inside the entry body: its CRC no longer matches
    damaged.write_bytes(bytes(data))
    assert main(["segment", "dump", str(damaged), "--schema-cql", str(schema)]) == 1
    out, err = capsys.readouterr()
    dumped = [json.loads(line)["position"]["offset"] for line in out.splitlines()]
    assert victim.offset not in dumped
    assert len(dumped) == len(updates) - 1
    errors = [json.loads(line) for line in err.splitlines() if '"error"' in line]
    assert [e["offset"] for e in errors] == [victim.offset] and errors[0]["segment"] == original.name


def test_missing_schema_source_is_a_clear_error(fixture_40, capsys: pytest.CaptureFixture[str]) -> None:
    folder, _, _ = fixture_40
    assert main(["segment", "dump", str(folder)]) == 2
    assert "give --schema-cql FILE, --host HOST or --config FILE" in capsys.readouterr()[1]
