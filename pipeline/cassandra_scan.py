"""Read a whole CDC table from Cassandra in parallel: the Murmur3 ring cut into token ranges, one Spark
task per range, each with its own cassandra-driver connection.

Used by ``bootstrap`` (rows with the write time and TTL of every cell) and ``reconcile`` (plain rows at
consistency ALL). ``scan_table`` returns an RDD of plain dicts:

* every column of the table (partition key, clustering, static, regular) by name, as cassandra-driver
  returns it, except that user-defined types come back as ``UdtValue`` (a dict that also answers
  attribute access, as the driver's namedtuples do) so that rows can be pickled between Spark stages;
* with ``with_write_times``, for each static and regular column ``writetime(<name>)`` and ``ttl(<name>)``
  (``write_time_key``/``ttl_key``): the cell's write time (µs) and remaining TTL (s, None if none), or,
  for a non-frozen collection or UDT, one entry per live element in Cassandra's element order (set
  elements and map keys by their type's order, list positions, UDT fields by index; Cassandra 5.0),
  None when the column is null; and ``_scan_time_s`` (``SCAN_TIME_KEY``): the executor's clock (s) just
  before the range was queried, a lower bound of the time the replica computed every TTL against.

Rows of one partition are consecutive, in clustering order, and in one RDD partition (a partition has
one token, so it is never cut between ranges): ``itertools.groupby`` on the partition key works per RDD
partition. Reading goes through the pure-Python protocol handler: the driver's compiled deserializers
reject the null elements Cassandra 5.0 puts in ``ttl(<collection>)`` (an element without TTL).

Every connection, on the driver and in the executors, is made by ``runtime.cassandra_session`` from the
``cassandra`` section (login, TLS). The ScanSpec shipped to the executors carries that section: its
passwords are ``Secret``s, which pickle with their value and print as ``***`` (a task's error or log line
that shows the spec shows no password); the TLS context is built again in each task from the file paths,
so the CA (and client key) files must be readable at the same paths on every executor.
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import pickle
import struct
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from cassandra_model.table_schema import TableSchema
from pipeline import native_core
from pipeline.errors import PipelineError, ServiceUnreachable
from runtime.cassandra_session import cassandra_cluster, explain_cassandra_error
from runtime.config import CassandraConfig, CdcConfig
from runtime.secrets import scrub
from runtime.tls import ClientSetupError

if TYPE_CHECKING:
    from pyspark import RDD
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

#: the Murmur3 ring: tokens are in (MIN_TOKEN, MAX_TOKEN]; Long.MIN_VALUE is never a key's token
MIN_TOKEN = -(2**63)
MAX_TOKEN = 2**63 - 1

SCAN_TIME_KEY = "_scan_time_s"

CONSISTENCY_LEVELS = ("ONE", "LOCAL_ONE", "LOCAL_QUORUM", "QUORUM", "ALL")


def write_time_key(column: str) -> str:
    """The row dict key of a column's write time(s) in a scan with write times."""
    return f"writetime({column})"


def ttl_key(column: str) -> str:
    """The row dict key of a column's remaining TTL(s) in a scan with write times."""
    return f"ttl({column})"


class UdtValue(dict[str, Any]):
    """A user-defined type value: a dict by field name that also answers ``value.field`` like the driver's
    namedtuples, but is a module-level class, so Spark can pickle it."""

    def __init__(self, **fields: Any) -> None:
        super().__init__(fields)

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def __reduce__(self) -> tuple[Any, ...]:
        return (_udt_value, (dict(self),))


def _udt_value(fields: dict[str, Any]) -> UdtValue:
    return UdtValue(**fields)


def token_ranges(splits: int) -> list[tuple[int, int]]:
    """The ring cut into ``splits`` contiguous ranges ``(start, end]`` of nearly equal width."""
    if splits < 1:
        raise PipelineError(f"pipeline.bootstrap_splits must be at least 1, got {splits}")
    width = MAX_TOKEN - MIN_TOKEN
    bounds = [MIN_TOKEN + width * i // splits for i in range(splits)] + [MAX_TOKEN]
    return [(bounds[i], bounds[i + 1]) for i in range(splits) if bounds[i] < bounds[i + 1]]


def quote(name: str) -> str:
    """A CQL identifier, always quoted (keeps case and odd characters)."""
    return '"' + name.replace('"', '""') + '"'


@dataclass(slots=True, frozen=True)
class ScanSpec:
    """Everything a Spark task needs to scan ranges of one table (pickled to the executors, the cassandra
    section's secrets with it; its repr shows them as ``***``)."""

    cassandra: CassandraConfig
    keyspace: str
    table: str
    columns: tuple[str, ...]
    key_columns: tuple[str, ...]
    timed_columns: tuple[str, ...]
    udts: tuple[tuple[str, str], ...]
    consistency: str
    page_size: int
    with_write_times: bool
    connect_timeout_s: float = 10.0
    request_timeout_s: float = 60.0

    @property
    def table_name(self) -> str:
        return f"{self.keyspace}.{self.table}"

    @property
    def endpoints(self) -> str:
        return ", ".join(f"{host}:{self.cassandra.port}" for host in self.cassandra.contact_points)

    def select(self) -> str:
        """The range query: every column (and write times and TTLs) of rows with a token in (?, ?]."""
        parts = [quote(c) for c in self.columns]
        for name in self.timed_columns:
            parts += [f"WRITETIME({quote(name)})", f"TTL({quote(name)})"]
        pk = ", ".join(quote(c) for c in self.key_columns)
        return (
            f"SELECT {', '.join(parts)} FROM {quote(self.keyspace)}.{quote(self.table)} "
            f"WHERE token({pk}) > ? AND token({pk}) <= ?"
        )


def scan_spec(
    config: CdcConfig,
    schema: TableSchema,
    *,
    with_write_times: bool,
    consistency: str | None = None,
) -> ScanSpec:
    """The scan of one table; refuses what cannot be read (write times of a counter table)."""
    pipeline = config.pipeline
    level = (consistency or (pipeline.scan_consistency if pipeline else "LOCAL_QUORUM")).upper()
    if level not in CONSISTENCY_LEVELS:
        raise PipelineError(
            f"scan of {schema.name}: consistency {level!r} is not one of {', '.join(CONSISTENCY_LEVELS)} "
            "(config pipeline.scan_consistency)"
        )
    if with_write_times and schema.is_counter:
        raise PipelineError(
            f"{schema.name} is a counter table: Cassandra allows no WRITETIME/TTL on counters, so its rows "
            "cannot be bootstrapped with their timestamps; leave it out of --tables"
        )
    udts = {(u.keyspace, u.name) for c in schema.all_columns() for u in c.type.user_types()}
    timed = [*schema.static_columns, *schema.regular_columns] if with_write_times else []
    return ScanSpec(
        cassandra=config.cassandra,
        keyspace=schema.keyspace,
        table=schema.table,
        columns=tuple(c.name for c in schema.all_columns()),
        key_columns=tuple(c.name for c in schema.partition_key),
        timed_columns=tuple(timed),
        udts=tuple(sorted(udts)),
        consistency=level,
        page_size=pipeline.scan_page_size if pipeline else 1000,
        with_write_times=with_write_times,
    )


_I32 = struct.Struct(">i")


def _raw_rows(data: bytes, count: int, width: int) -> list[list[bytes | None]]:
    """``count`` rows of ``width`` values from a result's row data: each the protocol's bytes (int32
    length, then the bytes; -1 is null), not decoded. A value that runs past the page's end is a
    ValueError naming it."""
    rows = []
    pos = 0
    end = len(data)
    unpack = _I32.unpack_from
    for n in range(count):
        row: list[bytes | None] = []
        for k in range(width):
            if pos + 4 > end:
                raise ValueError(_past_end(n, count, k, width, end))
            (size,) = unpack(data, pos)
            pos += 4
            if size < 0:
                row.append(None)
            else:
                if pos + size > end:
                    raise ValueError(_past_end(n, count, k, width, end))
                row.append(data[pos : pos + size])
                pos += size
        rows.append(row)
    return rows


def _past_end(row: int, count: int, value: int, width: int, size: int) -> str:
    return f"value {value + 1} of {width} in row {row + 1} of {count} runs past the end of the page ({size} bytes)"


_native_raw_rows = native_core.raw_rows


def page_rows(data: bytes, count: int, width: int) -> list[list[bytes | None]]:
    """``_raw_rows`` (the specification), by the native core where it is installed; a malformed page is
    a PipelineError."""
    cut = _raw_rows if _native_raw_rows is None else _native_raw_rows
    try:
        return cut(data, count, width)  # type: ignore[no-any-return]
    except ValueError as exc:
        raise PipelineError(f"bootstrap scan: a result page of {count} rows is malformed: {exc}") from exc


@dataclass(slots=True, frozen=True)
class RawPage:
    """One result page of a raw scan, not cut into values: ``count`` rows of ``width`` values, each an
    int32 length (negative: null) and its bytes, as the protocol sends them; ``scan_time`` is when its
    token range's read began (s since the epoch, what its TTLs count from)."""

    data: bytes
    count: int
    width: int
    scan_time: int

    def rows(self) -> list[list[Any]]:
        """Its raw rows (``page_rows``), each with the scan time appended: ``scan_raw_ranges``' rows."""
        rows: list[list[Any]] = page_rows(self.data, self.count, self.width)
        for row in rows:
            row.append(self.scan_time)
        return rows


def _raw_protocol_handler() -> Any:
    """A cassandra-driver protocol handler whose result pages are left whole, each one "row" of
    (data, count, width): the bootstrap's scan cuts them (``page_rows``) or hands them to the native
    encoder as they are."""
    from cassandra.protocol import ResultMessage, _ProtocolHandler, read_int

    class RawRowsMessage(ResultMessage):  # type: ignore[misc]
        def recv_results_rows(
            self, f: Any, protocol_version: int, user_type_map: Any, result_metadata: Any, policy: Any
        ) -> None:
            self.recv_results_metadata(f, user_type_map)
            column_metadata = self.column_metadata or result_metadata
            count = read_int(f)
            self.parsed_rows = [(f.read(), count, len(column_metadata))]
            self.column_names = [c[2] for c in column_metadata]
            self.column_types = [c[3] for c in column_metadata]

    class RawRowsHandler(_ProtocolHandler):  # type: ignore[misc]
        message_types_by_opcode: ClassVar[dict[int, Any]] = {
            **_ProtocolHandler.message_types_by_opcode,
            ResultMessage.opcode: RawRowsMessage,
        }

    return RawRowsHandler


def connect(spec: ScanSpec, *, raw: bool = False) -> tuple[Any, Any]:
    """A cassandra-driver (cluster, session) for one task, with the config's login and TLS.

    A refused login or a failed TLS handshake is a PipelineError naming the setting to fix (no secret);
    a node that does not answer is ServiceUnreachable naming the address."""
    from cassandra import AuthenticationFailed
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, ExecutionProfile, NoHostAvailable
    from cassandra.policies import DCAwareRoundRobinPolicy, TokenAwarePolicy
    from cassandra.protocol import _ProtocolHandler
    from cassandra.query import tuple_factory

    profile = ExecutionProfile(
        load_balancing_policy=TokenAwarePolicy(DCAwareRoundRobinPolicy()),
        request_timeout=spec.request_timeout_s,
        row_factory=tuple_factory,
    )
    try:
        cluster = cassandra_cluster(
            spec.cassandra,
            execution_profiles={EXEC_PROFILE_DEFAULT: profile},
            connect_timeout=spec.connect_timeout_s,
            control_connection_timeout=spec.connect_timeout_s,
            # a scan queries one table by token range: it needs neither the ring (a range query has no
            # routing key) nor the schema of every keyspace, which a connection otherwise reads and parses
            # (the bootstrap's tasks spent more CPU, the node's included, on that than on their rows),
            # except to decode user-defined types into classes of ours
            schema_metadata_enabled=bool(spec.udts) and not raw,
            token_metadata_enabled=False,
        )
    except ClientSetupError as exc:  # an unreadable CA or key file, a login without its password
        raise PipelineError(f"cannot connect to Cassandra to scan {spec.table_name}: {exc}") from None
    if not raw:  # the raw scan keeps every value as its bytes
        for keyspace, name in spec.udts:
            cluster.register_user_type(keyspace, name, UdtValue)
    try:
        session = cluster.connect()
    except (NoHostAvailable, AuthenticationFailed, OSError) as exc:
        cluster.shutdown()
        reason = explain_cassandra_error(exc, spec.cassandra)
        if reason is not None:
            raise PipelineError(f"cannot scan {spec.table_name}: {reason}") from exc
        detail = scrub(str(exc), (spec.cassandra.password, spec.cassandra.tls.key_password))
        raise ServiceUnreachable(
            f"cannot reach Cassandra at {spec.endpoints} (config cassandra.contact_points, cassandra.port) to "
            f"scan {spec.table_name}: {detail}"
        ) from exc
    session.client_protocol_handler = _raw_protocol_handler() if raw else _ProtocolHandler
    return cluster, session


def check_table(spec: ScanSpec) -> None:
    """Fail early, on the driver, when Cassandra is unreachable or refuses the scan query."""
    cluster, session = connect(spec, raw=True)
    try:
        _prepare(session, spec)
    finally:
        cluster.shutdown()


def _prepare(session: Any, spec: ScanSpec) -> Any:
    from cassandra import ConsistencyLevel, InvalidRequest, Unauthorized

    try:
        statement = session.prepare(spec.select())
    except Unauthorized as exc:
        raise PipelineError(
            f"Cassandra role {spec.cassandra.username!r} (config cassandra.username) may not read "
            f"{spec.table_name}: {exc}; GRANT SELECT ON KEYSPACE {quote(spec.keyspace)} TO that role"
        ) from exc
    except InvalidRequest as exc:
        hint = ""
        if spec.with_write_times:
            hint = " (WRITETIME/TTL of non-frozen collections and UDTs needs Cassandra 5.0)"
        raise PipelineError(
            f"Cassandra refuses the scan of {spec.table_name}{hint}: {exc}; does the schema topic match "
            "the table?"
        ) from exc
    statement.consistency_level = getattr(ConsistencyLevel, spec.consistency)
    statement.fetch_size = spec.page_size
    return statement


#: open connections of this process, by what makes them (login, TLS, protocol handler): a Python worker of
#: Spark runs task after task, and a connection costs a handshake and its queries each time, on the node too
_SESSIONS: OrderedDict[bytes, tuple[Any, Any, dict[str, Any]]] = OrderedDict()
_SESSIONS_KEPT = 4


def _close_sessions() -> None:
    while _SESSIONS:
        _, (cluster, _, _) = _SESSIONS.popitem()
        cluster.shutdown()


atexit.register(_close_sessions)


@contextmanager
def _task_statement(spec: ScanSpec, *, raw: bool) -> Iterator[tuple[Any, Any]]:
    """(session, prepared scan statement) for a task: this process's connection for the spec's cassandra
    section, opened on first use and kept for the next task; dropped if a query fails on it."""
    key = hashlib.sha256(pickle.dumps((spec.cassandra, spec.udts, raw))).digest()
    entry = _SESSIONS.get(key)
    if entry is None:
        cluster, session = connect(spec, raw=raw)
        entry = _SESSIONS[key] = (cluster, session, {})
        while len(_SESSIONS) > _SESSIONS_KEPT:
            _SESSIONS.popitem(last=False)[1][0].shutdown()
    _SESSIONS.move_to_end(key)
    cluster, session, statements = entry
    query = spec.select()
    try:
        statement = statements.get(query)
        if statement is None:
            statement = statements[query] = _prepare(session, spec)
        yield session, statement
    except BaseException:
        _SESSIONS.pop(key, None)
        cluster.shutdown()
        raise


def scan_ranges(spec: ScanSpec, ranges: Iterable[tuple[int, int]]) -> Iterator[dict[str, Any]]:
    """Rows of the given token ranges (one connection per process, kept between tasks)."""
    with _task_statement(spec, raw=False) as (session, statement):
        names = spec.columns
        timed = [(write_time_key(n), ttl_key(n)) for n in spec.timed_columns]
        for start, end in ranges:
            scan_time = int(time.time())
            for raw in session.execute(statement, (start, end)):
                row = dict(zip(names, raw, strict=False))
                if spec.with_write_times:
                    position = len(names)
                    for wt, tl in timed:
                        row[wt] = raw[position]
                        row[tl] = raw[position + 1]
                        position += 2
                    row[SCAN_TIME_KEY] = scan_time
                yield row


def scan_raw_pages(spec: ScanSpec, ranges: Iterable[tuple[int, int]]) -> Iterator[RawPage]:
    """The result pages of the given token ranges with write times, their values not cut; one
    connection per process, kept between tasks."""
    with _task_statement(spec, raw=True) as (session, statement):
        for start, end in ranges:
            scan_time = int(time.time())
            for data, count, width in session.execute(statement, (start, end)):
                yield RawPage(data, count, width, scan_time)


def scan_raw_ranges(spec: ScanSpec, ranges: Iterable[tuple[int, int]]) -> Iterator[list[Any]]:
    """The rows of the given token ranges with write times, undecoded (``snapshot_encoder``'s raw rows:
    the values' bytes, then the scan time)."""
    for page in scan_raw_pages(spec, ranges):
        yield from page.rows()


def scan_table(
    spark: SparkSession,
    config: CdcConfig,
    schema: TableSchema,
    *,
    with_write_times: bool,
    consistency: str | None = None,
    splits: int | None = None,
    raw_pages: bool = False,
) -> RDD[Any]:
    """Every row of a table as an RDD of dicts (see the module docstring), or with ``raw_pages`` (and
    write times) of its result pages, not cut (``scan_raw_pages``), one Spark partition per token range (``splits``,
    default ``pipeline.bootstrap_splits``). Checks on the driver first that Cassandra answers and accepts
    the query, so a bad address or schema fails with a clear error, not in a task."""
    spec = scan_spec(config, schema, with_write_times=with_write_times, consistency=consistency)
    count = splits if splits is not None else (config.pipeline.bootstrap_splits if config.pipeline else 64)
    ranges = token_ranges(count)
    check_table(spec)
    scan = scan_raw_pages if raw_pages else scan_ranges
    return spark.sparkContext.parallelize(ranges, len(ranges)).mapPartitions(lambda part: scan(spec, part))
