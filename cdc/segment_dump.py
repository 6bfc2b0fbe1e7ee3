"""`cdc segment dump`: commit-log segments as JSON lines, one per partition update (like sstabledump).

Updates go to stdout; damage, undecodable entries, unknown tables and unsupported segments go to stderr
as JSON lines naming the segment and offset. The exit status is 1 when a segment, section or entry
could not be read or decoded; skipped mutations of tables outside the schema are reported, not failed.

The schema comes from a CQL file or from a node's system_schema. A node is reached with the driver
Cluster of runtime.cassandra_session, so `--config FILE` (the agent's config format) brings its
`cassandra` section: contact point, port, username, password and TLS. `--host`/`--port` pick the node
(with or without a config).
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from cassandra.cluster import EXEC_PROFILE_DEFAULT, ExecutionProfile
from cassandra.policies import WhiteListRoundRobinPolicy

from agents.cdc_raw import list_cdc_segments
from agents.commitlog.cdc_index import read_cdc_index
from agents.commitlog.descriptor import parse_segment_name
from agents.commitlog.dump_format import render_update
from agents.commitlog.errors import CommitLogError
from agents.commitlog.log_reader import SegmentDecoder
from cassandra_model.ddl_parser import load_schema_from_cql
from cassandra_model.digest import update_digest_hex
from cassandra_model.errors import ModelError
from cassandra_model.system_schema import load_schema_from_session
from cassandra_model.table_schema import SchemaCatalog
from runtime.cassandra_session import cassandra_cluster, explain_cassandra_error
from runtime.config import CassandraConfig, load_config
from runtime.secrets import scrub

DEFAULT_CQL_PORT = 9042


class SchemaLoadError(ValueError):
    """The schema could not be read from the node; the message says why and, when the config can fix it,
    which key (never a secret)."""


@dataclass(slots=True, frozen=True)
class DumpTarget:
    """One segment file and how far to read it: its `_cdc.idx` says so when present."""

    path: Path
    limit: int | None
    completed: bool


def load_catalog(
    schema_cql: Path | None,
    host: str | None = None,
    port: int | None = None,
    *,
    config_file: Path | None = None,
) -> SchemaCatalog:
    """The schema from `schema_cql`, or from a node's system_schema.

    The node is `host` (default: the first of the config's cassandra.contact_points) on `port` (default:
    the config's cassandra.port, else 9042); credentials and TLS come from the `cassandra` section of
    `config_file` (loaded as the agent loads it, with CDC__ overrides), none without one.
    """
    if schema_cql is not None:
        if config_file is not None or host is not None:
            raise ValueError("--schema-cql reads no node: give it alone, or --host/--config without it")
        return load_schema_from_cql(schema_cql)
    if host is None and config_file is None:
        raise ValueError(
            "a schema is needed to decode rows: give --schema-cql FILE, --host HOST or --config FILE"
        )
    cassandra = load_config(config_file).cassandra if config_file is not None else CassandraConfig()
    if host is None and not cassandra.contact_points:
        raise ValueError(f"config {config_file} has no cassandra.contact_points: give --host HOST")
    return load_catalog_from_node(
        cassandra,
        host or cassandra.contact_points[0],
        port if port is not None else (cassandra.port if config_file is not None else DEFAULT_CQL_PORT),
    )


def load_catalog_from_node(cassandra: CassandraConfig, host: str, port: int) -> SchemaCatalog:
    """Every table of one node's system_schema (queries pinned to that node), with `cassandra`'s login
    and TLS; SchemaLoadError names the setting at fault."""
    logging.getLogger("cassandra").setLevel(logging.ERROR)
    profile = ExecutionProfile(load_balancing_policy=WhiteListRoundRobinPolicy([host]), request_timeout=30.0)
    cluster = cassandra_cluster(
        cassandra,
        contact_points=[host],
        port=port,
        protocol_version=5,
        execution_profiles={EXEC_PROFILE_DEFAULT: profile},
        connect_timeout=10,
        control_connection_timeout=10,
    )
    try:
        return load_schema_from_session(cluster.connect())
    except (CommitLogError, ModelError):
        raise
    except Exception as exc:  # the driver's errors of every kind
        reason = explain_cassandra_error(exc, cassandra)
        if reason is None:
            reason = scrub(f"{type(exc).__name__}: {exc}", (cassandra.password, cassandra.tls.key_password))
        raise SchemaLoadError(f"cannot read the schema from Cassandra at {host}:{port}: {reason}") from None
    finally:
        cluster.shutdown()


def expand_targets(paths: list[Path]) -> list[DumpTarget]:
    """Files as given (bounded by their `_cdc.idx` when one sits beside them); folders as cdc_raw folders."""
    targets: list[DumpTarget] = []
    for path in paths:
        if path.is_dir():
            for segment in list_cdc_segments(path):
                index = segment.index
                targets.append(
                    DumpTarget(
                        segment.path, index.read_limit if index else None, index.completed if index else True
                    )
                )
        elif path.is_file():
            index = None
            with contextlib.suppress(CommitLogError):  # not named like a segment: read it whole
                index = read_cdc_index(path.with_name(parse_segment_name(path.name).index_file))
            targets.append(
                DumpTarget(path, index.read_limit if index else None, index.completed if index else True)
            )
        else:
            raise ValueError(f"{path}: no such file or folder")
    return targets


def _report(err: TextIO, **fields: object) -> None:
    err.write(json.dumps(fields, default=str) + "\n")


def dump(
    targets: list[DumpTarget],
    catalog: SchemaCatalog,
    *,
    start: int = 0,
    stop: int | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    problems = 0
    for target in targets:
        limit = target.limit if stop is None else (stop if target.limit is None else min(stop, target.limit))
        try:
            with SegmentDecoder(
                target.path, catalog, start=start, limit=limit, completed=target.completed
            ) as decoder:
                for update in decoder:
                    out.write(json.dumps(render_update(update, digest=update_digest_hex(update))) + "\n")
        except (CommitLogError, ModelError) as exc:
            problems += 1
            _report(
                err,
                level="error",
                segment=exc.segment or target.path.name,
                offset=exc.offset,
                reason=exc.reason,
            )
            continue
        for damage in decoder.damage:
            problems += 1
            _report(
                err,
                level="error",
                segment=damage.segment,
                offset=damage.offset,
                position=damage.position,
                scope=str(damage.scope),
                reason=damage.reason,
            )
        for error in decoder.stats.decode_errors:
            problems += 1
            _report(err, level="error", segment=error.segment, offset=error.offset, reason=error.reason)
        if decoder.stats.unknown_tables:  # expected for tables outside the given schema: not a failure
            _report(
                err,
                level="warning",
                segment=decoder.segment,
                reason="mutations of tables missing from the schema were skipped",
                unknown_tables={str(k): v for k, v in decoder.stats.unknown_tables.items()},
            )
        for change in decoder.stats.schema_changes:
            _report(err, level="info", segment=decoder.segment, reason="schema change", keyspace=change.keyspace,
                    table=change.table, kind=change.kind)  # fmt: skip
        _report(
            err,
            level="info",
            segment=decoder.segment,
            entries=decoder.stats.entries,
            updates=decoder.stats.updates,
            resume_position=decoder.resume_position,
            stop=str(decoder.stop),
        )
    out.flush()
    return 1 if problems else 0
