"""The upstream commit-log fixtures: their hash.txt and the schema of the table they were written for."""

from __future__ import annotations

from pathlib import Path

from agents.commitlog.log_reader import decode_segment
from cassandra_model.ddl_parser import load_schema_from_cql
from cassandra_model.partition_update import PartitionUpdate
from cassandra_model.table_schema import SchemaCatalog


def read_hash_txt(folder: Path) -> dict[str, str]:
    """hash.txt (Java properties): the `cells`, `hash` and `cfid` the folder's segments must decode to."""
    lines = folder.joinpath("hash.txt").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))


def standard1_cql(cfid: str) -> str:
    """Keyspace1.Standard1 as the upstream fixture maker created it (format notes §11.2; 3.0 added val0)."""
    columns = "key ascii, col ascii, val blob, val0 blob, PRIMARY KEY (key, col)"
    return f'CREATE TABLE "Keyspace1"."Standard1" ({columns}) WITH ID = {cfid};\n'


def decode_fixture(folder: Path) -> tuple[list[PartitionUpdate], SchemaCatalog]:
    """Every Standard1 update of the folder's segments (other tables are skipped as unknown)."""
    catalog = load_schema_from_cql(standard1_cql(read_hash_txt(folder)["cfid"]))
    updates: list[PartitionUpdate] = []
    for segment in sorted(folder.glob("*.log")):
        updates += decode_segment(segment, catalog, completed=True)[0]
    return updates, catalog
