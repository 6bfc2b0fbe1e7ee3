"""One YAML configuration for the agent and the worker, with environment overrides and validation.

Every key can be overridden by an environment variable `CDC__<SECTION>__<KEY>` (for example
`CDC__KAFKA__BOOTSTRAP_SERVERS=broker:9092`, `CDC__KAFKA__SECURITY__PROTOCOL=SASL_SSL`); its value is read as
a YAML scalar or list (a secret's as the text it is). Errors name the key, where its value came from (file or
variable) and what is expected.

Passwords are `Secret`s (runtime/secrets.py): given inline, as `${ENV_VAR}` or as `file:/path`, resolved at
load, and shown as `***` in every repr, message and dump (`dump_config`).
"""

from __future__ import annotations

import os
import re
import socket
import types
import typing
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import yaml

from runtime.secrets import MASK, Secret

ENV_PREFIX = "CDC__"


class ConfigError(ValueError):
    """The configuration file or an override is missing, malformed or out of range."""


_SIZE = re.compile(r"^\s*(\d+)\s*(B|KiB|MiB|GiB|TiB)?\s*$", re.IGNORECASE)
_UNITS = {"b": 1, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_size(value: object) -> int:
    """Bytes from an integer or a string such as `4096MiB` (the unit style of cassandra.yaml)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    match = _SIZE.match(str(value))
    if not match:
        raise ValueError(f"expected a size such as 1024MiB, got {value!r}")
    return int(match[1]) * _UNITS[(match[2] or "B").lower()]


class ByteSize(int):
    """An int parsed with parse_size, so YAML may say `cdc_total_space: 4096MiB`."""


DEFAULT_MAX_IN_FLIGHT = ByteSize(16 * 2**20)
DEFAULT_CDC_TOTAL_SPACE = ByteSize(4096 * 2**20)  # Cassandra's default cap (or 1/8 of the volume)
DEFAULT_BLOCK_CACHE = ByteSize(64 * 2**20)
DEFAULT_WRITE_BUFFER = ByteSize(8 * 2**20)
DEFAULT_MEMTABLE_BUDGET = ByteSize(128 * 2**20)


KafkaProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
#: the compatibility levels of the Confluent schema registry REST API (``PUT /config/{subject}``)
RegistryCompatibility = Literal[
    "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE", "NONE"
]
#: how clean topics write a CQL decimal (Debezium's ``decimal.handling.mode``; see WorkerConfig)
DecimalHandling = Literal["precise", "string", "double"]
TLS_PROTOCOLS = ("SSL", "SASL_SSL")
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")


@dataclass(slots=True, frozen=True)
class KafkaSecurityConfig:
    """How every Kafka client (agent, worker, Spark jobs, cdc verify/demo) authenticates and encrypts."""

    protocol: KafkaProtocol = "PLAINTEXT"
    """The listener's security protocol (Kafka's security.protocol)."""
    sasl_mechanism: SaslMechanism | None = None
    """Required with SASL_PLAINTEXT and SASL_SSL."""
    username: str | None = None
    password: Secret | None = None
    ca_file: Path | None = None
    """PEM file of the CA(s) that signed the brokers' certificates; default the system's trust store."""
    cert_file: Path | None = None
    """PEM client certificate, for brokers that ask for one (mutual TLS); needs key_file."""
    key_file: Path | None = None
    """PEM private key of cert_file (PKCS#8 for the Spark jobs: `BEGIN [ENCRYPTED] PRIVATE KEY`)."""
    key_password: Secret | None = None
    """Password of an encrypted key_file."""
    check_hostname: bool = True
    """Check that a broker's certificate names the host it was reached at; turn off only for tests."""

    @property
    def tls(self) -> bool:
        return self.protocol in TLS_PROTOCOLS

    @property
    def sasl(self) -> bool:
        return self.protocol in SASL_PROTOCOLS


@dataclass(slots=True, frozen=True)
class KafkaConfig:
    bootstrap_servers: str = "127.0.0.1:9092"
    raw_topic: str = "cdc.raw"
    schema_topic: str = "cdc.schemas"
    raw_partitions: int = 12
    replication_factor: int = 1
    request_timeout_ms: int = 30_000
    security: KafkaSecurityConfig = field(default_factory=KafkaSecurityConfig)


@dataclass(slots=True, frozen=True)
class CassandraTlsConfig:
    """TLS to the nodes' CQL port (client_encryption_options in cassandra.yaml)."""

    enabled: bool = False
    ca_file: Path | None = None
    """PEM file of the CA(s) that signed the nodes' certificates; default the system's trust store."""
    cert_file: Path | None = None
    """PEM client certificate, for nodes with require_client_auth (mutual TLS); needs key_file."""
    key_file: Path | None = None
    key_password: Secret | None = None
    check_hostname: bool = True
    """Check that a node's certificate names the address it was reached at (peers are reached at their
    rpc address, so certificates need those IPs as subject alternative names)."""


@dataclass(slots=True, frozen=True)
class CassandraConfig:
    contact_points: list[str] = field(default_factory=lambda: ["127.0.0.1"])
    port: int = 9042
    keyspaces: list[str] = field(default_factory=list)
    """Keyspaces whose CDC tables are captured; empty means every keyspace."""
    username: str | None = None
    """Role for PasswordAuthenticator; with password."""
    password: Secret | None = None
    tls: CassandraTlsConfig = field(default_factory=CassandraTlsConfig)


@dataclass(slots=True, frozen=True)
class AgentConfig:
    cdc_raw_directory: Path
    state_directory: Path
    node: str = field(default_factory=socket.gethostname)
    """Name of the Cassandra node this agent serves; it goes into every event's source."""
    processed_segments: Literal["delete", "archive"] = "delete"
    archive_directory: Path | None = None
    quarantine_directory: Path | None = None
    """Where unreadable segments are copied with their report; default <state_directory>/quarantine."""
    poll_interval_ms: int = 50
    max_in_flight_bytes: ByteSize = DEFAULT_MAX_IN_FLIGHT
    offset_flush_interval_ms: int = 200
    cdc_total_space: ByteSize = DEFAULT_CDC_TOTAL_SPACE
    """The node's cdc_total_space (cassandra.yaml), to report how full cdc_raw is."""
    schema_refresh_interval_s: int = 60
    metrics_bind: str = "127.0.0.1"
    metrics_port: int = 9464
    core: Literal["auto", "native", "python"] = "auto"
    """The per-event core: ``native`` (the Rust extension built by `make setup`), ``python`` (the decoder
    that is its specification), or ``auto``: native when installed. /health and /metrics say which runs."""


@dataclass(slots=True, frozen=True)
class WorkerConfig:
    data_directory: Path
    """RocksDB state, one database per raw-topic partition; rebuilt from the changelog when empty."""
    app_id: str = "cdc-worker"
    """Consumer group of the workers and prefix of their changelog topic; one per pipeline."""
    worker_id: str = field(default_factory=socket.gethostname)
    """Stable name of this worker; its Kafka transactional id, so a restart fences its predecessor."""
    clean_topic_prefix: str = "cdc"
    """Clean topics are <prefix>.<keyspace>.<table>."""
    clean_partitions: int = 12
    encoding: Literal["json", "json_schema", "avro"] = "json"
    """How clean events are written: ``json`` (plain JSON, the lake job's input), ``json_schema`` (Kafka
    Connect's JsonConverter form ``{"schema", "payload"}``, for Connect sinks without a registry) or ``avro``
    (Confluent wire format, schemas in ``schema_registry_url``)."""
    schema_registry_url: str | None = None
    """Confluent-compatible schema registry, required when encoding is avro."""
    schema_compatibility: Literal[RegistryCompatibility, "registry"] = "BACKWARD"
    """Compatibility level the worker sets on each `<topic>-key|value` subject it creates, before the
    subject's first schema, so the registry itself refuses a table change that would break consumers (the
    worker then stops with the registry's 409). BACKWARD: a consumer with the newest schema reads every
    older event; ADD and DROP COLUMN pass (non-key columns are optional, default null). `registry` sets
    nothing: the registry's global level applies, which is BACKWARD on Confluent's but NONE (no check)
    on Apicurio's. A subject that exists keeps its level."""
    decimal_handling: DecimalHandling = "precise"
    """How a CQL decimal is written (Debezium's ``decimal.handling.mode``). ``precise``: exact with its own
    scale: Avro's record ``cdc.change.Decimal`` {unscaled, scale}, a string such as ``"1.50"`` or
    ``"1E+3"`` in JSON and ``json_schema``; Debezium's JDBC sink cannot store the Avro record. ``string``:
    exact plain digits (``"1000"``, ``"1.50"``), which every sink stores (as text). ``double``: the
    nearest double, which sinks store as a number, losing digits beyond about 15 (key columns stay
    exact strings: a lossy key could merge two rows)."""
    batch_max_events: int = 20_000
    """Most raw events merged in one batch, committed in one Kafka transaction per raw partition it touches
    (the partition's transactional id fences a worker that lost it). Each transaction waits for about five
    round trips and costs about a CPU-ms in the client: with 5000 events over 12 partitions a busy worker
    was 14% slower than with one transaction per batch, with 20000 as fast (bench/transaction_scheme.md),
    for about 35 MB more memory while a backlog is merged."""
    batch_max_wait_ms: int = 50
    """How long a batch waits for more events once the first has arrived (a quiet stream's latency)."""
    core: Literal["auto", "native", "python"] = "auto"
    """The per-record core: ``native`` (the Rust extension built by `make setup`), ``python`` (the code
    that is its specification), or ``auto``: native when installed. The log, /health and /metrics say
    which runs."""
    digest_horizon_s: int = 3 * 86400
    """How long a partition update's digest is remembered to drop replica copies (hints arrive within
    max_hint_window, 3 h by default); copies older than this are merged again, harmlessly while the
    tombstones they meet are kept (``tombstone_floor_s``)."""
    tombstone_floor_s: int | None = None
    """The shortest time the worker's state keeps a tombstone or an expired cell, whatever the table's
    gc_grace_seconds (it purges at the larger of the two); unset: ``digest_horizon_s``. A copy of an
    older write that arrives after the tombstone went would bring deleted data back with an event, and
    the worker's copies come late by design (several replicas, hints, a copy merged again once its
    digest is forgotten). Below ``digest_horizon_s`` only with ``allow_short_tombstone_floor``."""
    allow_short_tombstone_floor: bool = False
    """Accept a ``tombstone_floor_s`` below ``digest_horizon_s``: a copy that comes later than the floor
    may then bring a deleted row or an expired value back. Only for a deployment where no copy can be
    that late (replication factor 1, no hints), to keep less state on tables with gc_grace_seconds 0."""
    expiry_interval_ms: int = 1000
    heartbeat_interval_ms: int = 0
    """Every this many ms each worker writes a heartbeat to `__debezium-heartbeat.<clean_topic_prefix>`
    (Debezium's heartbeat.interval.ms), in a Kafka transaction, also while no raw event arrives, so a
    consumer can tell an idle table (heartbeats keep coming) from a stalled pipeline (they stop, or say
    records are behind). 0, the default, writes none. Record format: app/heartbeat.py."""
    transaction_timeout_ms: int = 20_000
    """How long the broker keeps a killed worker's open transactions before it aborts them (it looks every
    10 s); until then read_committed readers of the clean topics wait at them. The worker that takes the
    raw partitions over (or this one, restarted) aborts them at once: the transactional ids are the
    partitions' (`<app_id>-<partition>`)."""
    startup_timeout_s: int = 120
    """How long a starting worker waits for Kafka (topics, schemas, its producer) before it gives up."""
    outage_timeout_s: int = 180
    """How long a running worker retries a batch that Kafka does not take (a broker down, unreachable, or
    refusing the transaction) before it stops with exit code 1, for a supervisor to start it again (it
    then waits ``startup_timeout_s`` for Kafka, and merges the batch again from the committed offsets:
    nothing is lost or repeated). Counted from the batch's first failed attempt; the attempt under way
    ends first (at most a few transaction timeouts). A worker with no batch to commit waits for Kafka
    for as long as it takes; `/health` says degraded meanwhile."""
    session_timeout_ms: int = 15_000
    """How soon the group notices a dead worker and hands its partitions to the others."""
    standby_replicas: int = 0
    """1: the worker keeps a warm copy of every raw partition it does not own, tailing its changelog
    (read_committed, never emitting), as Kafka Streams' standby tasks do; a takeover then applies only the
    changelog's tail instead of the partition's whole state (bench/failover.md). It costs disk for the
    copies and CPU to apply every other worker's changelog; RocksDB memory stays within the shared block
    cache and memtable budget. With more than two workers each one copies all the partitions it does
    not own. 0 (the default): a takeover restores from the changelog."""
    web_bind: str = "127.0.0.1"
    web_port: int = 6066
    web_token: Secret | None = None
    """When set, REST requests need `Authorization: Bearer <token>` (health stays open); a secret (inline,
    ${ENV_VAR} or file:/path)."""
    counter_tables: Literal["merge", "refuse"] = "merge"
    """Counter tables merge shards (never last-write-wins); `refuse` drops their events with a metric."""
    block_cache_size: ByteSize = DEFAULT_BLOCK_CACHE
    """One RocksDB block cache shared by every partition database of the worker."""
    write_buffer_size: ByteSize = DEFAULT_WRITE_BUFFER
    memtable_budget: ByteSize = DEFAULT_MEMTABLE_BUDGET
    """RocksDB memtables of all the worker's partition databases together (one write buffer manager), so
    a worker's memory does not grow with the number of partitions it owns."""

    @property
    def tombstone_floor(self) -> int:
        """``tombstone_floor_s``, or ``digest_horizon_s`` when it is unset."""
        return self.digest_horizon_s if self.tombstone_floor_s is None else self.tombstone_floor_s


@dataclass(slots=True, frozen=True)
class PipelineConfig:
    """The Spark jobs (`cdc pipeline lake|bootstrap|replay|reconcile`)."""

    lake_directory: Path
    """Delta tables, one per CDC table: <lake_directory>/<keyspace>/<table>."""
    checkpoint_directory: Path | None = None
    """Streaming checkpoints of the lake job; default <lake_directory>/_checkpoints."""
    clean_topic_prefix: str = "cdc"
    """Prefix of the clean topics the lake job reads (the workers' clean_topic_prefix)."""
    master: str = "local[2]"
    driver_memory: str = "1g"
    shuffle_partitions: int = 4
    trigger_interval_s: int = 5
    """How often the lake job starts a micro-batch when changes are waiting."""
    max_offsets_per_trigger: int = 500_000
    """Upper bound on clean events per micro-batch, so a backlog is taken in bounded steps."""
    tombstone_retention_s: int = 7 * 86400
    """How long the lake remembers a deleted key's position, so a replayed older change cannot bring
    the row back; keep it at least the clean topics' delete.retention.ms."""
    bootstrap_splits: int = 64
    """Token ranges a bootstrap or reconcile scan of one table is cut into (Spark tasks)."""
    core: Literal["auto", "native", "python"] = "auto"
    """Which encoder builds the bootstrap's raw events: ``native`` (the Rust extension built by `make
    setup`), ``python`` (the code that is its specification), or ``auto``: native when installed. The
    job's first line says which."""
    scan_page_size: int = 1000
    """Rows per page when scanning Cassandra."""
    scan_consistency: Literal["ONE", "LOCAL_QUORUM", "QUORUM", "ALL"] = "LOCAL_QUORUM"
    """Consistency of bootstrap reads; reconcile always reads at ALL."""
    encoding: Literal["json", "json_schema", "avro"] | None = None
    """How the clean topics the lake job reads are encoded (the workers' ``worker.encoding``); unset: that
    key when the file has a worker section, else ``json``."""
    schema_registry_url: str | None = None
    """The registry the Avro clean topics' schemas are in; unset: ``worker.schema_registry_url``."""
    executor_python: str | None = None
    """The Python interpreter of the executors of a cluster (``master: spark://...``, ``yarn``, ``k8s://``);
    it needs the pipeline's dependencies installed. Unset: the path of the one running the job, which suits
    executors on this machine."""
    spark_conf: dict[str, str] = field(default_factory=dict)
    """More Spark settings for every job, e.g. ``spark.executor.memory: 2g`` or ``spark.cores.max: 4`` on a
    cluster; they take precedence over the jobs' own, except the redaction of secrets."""


@dataclass(slots=True, frozen=True)
class CdcConfig:
    cluster: str = "cdc-local"
    kafka: KafkaConfig = field(default_factory=KafkaConfig)
    cassandra: CassandraConfig = field(default_factory=CassandraConfig)
    agent: AgentConfig | None = None
    worker: WorkerConfig | None = None
    pipeline: PipelineConfig | None = None
    source: str = "<defaults>"


def load_config(path: Path | None, *, environ: dict[str, str] | None = None) -> CdcConfig:
    """Read `path` (YAML), apply CDC__* environment overrides, validate everything."""
    environ = dict(os.environ) if environ is None else environ
    data: dict[str, Any] = {}
    origin: dict[str, str] = {}
    if path is not None:
        try:
            loaded = yaml.safe_load(Path(path).read_text())
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {path} is not valid YAML: {exc}") from exc
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(
                f"config file {path} must hold a mapping of sections, not {type(loaded).__name__}"
            )
        data = loaded or {}
        origin = {k: f"file {path}" for k in _flatten(data)}
    raw: dict[str, str] = {}
    for name, value in sorted(environ.items()):
        if not name.startswith(ENV_PREFIX):
            continue
        keys = [part.lower() for part in name[len(ENV_PREFIX) :].split("__")]
        if not all(keys):
            raise ConfigError(f"environment variable {name}: expected CDC__<SECTION>__<KEY>")
        target = data
        for key in keys[:-1]:
            target = target.setdefault(key, {})
            if not isinstance(target, dict):
                raise ConfigError(f"environment variable {name}: {'.'.join(keys[:-1])} is not a section")
        try:
            target[keys[-1]] = yaml.safe_load(value) if value != "" else ""
        except yaml.YAMLError:
            target[keys[-1]] = value
        origin[".".join(keys)] = f"environment variable {name}"
        raw[".".join(keys)] = value
    config = _build(CdcConfig, data, "", _Sources(origin, environ, raw))
    return _replace_source(config, str(path) if path else "<environment>")


@dataclass(slots=True, frozen=True)
class _Sources:
    """Where each key's value came from, for messages, and what secrets may refer to."""

    origin: dict[str, str]
    environ: dict[str, str]
    raw: dict[str, str]
    """Overrides as the variables hold them: a secret is text as given, never read as YAML (`0123`)."""

    def of(self, key: str) -> str:
        return self.origin.get(key, "file")


def _replace_source(config: CdcConfig, source: str) -> CdcConfig:
    values = {f.name: getattr(config, f.name) for f in fields(config)}
    values["source"] = source
    return CdcConfig(**values)


def _flatten(data: dict[str, Any], prefix: str = "") -> list[str]:
    keys = []
    for key, value in data.items():
        path = f"{prefix}{key}"
        keys.append(path)
        if isinstance(value, dict):
            keys.extend(_flatten(value, path + "."))
    return keys


def _build(cls: type, data: Any, prefix: str, sources: _Sources) -> Any:
    where = prefix.rstrip(".") or "the top level"
    if not isinstance(data, dict):
        raise ConfigError(f"config key {where}: expected a mapping, got {data!r}")
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in fields(cls) if f.name != "source"}
    unknown = sorted(set(data) - set(known))
    if unknown:
        key = prefix + unknown[0]
        raise ConfigError(
            f"unknown config key {key} ({sources.of(key)}); valid keys under {where}: {', '.join(known)}"
        )
    values: dict[str, Any] = {}
    for name, spec in known.items():
        key = prefix + name
        if name not in data:
            if spec.default is MISSING and spec.default_factory is MISSING:
                raise ConfigError(f"missing required config key {key}")
            continue
        values[name] = _coerce(hints[name], data[name], key, sources)
    origin = sources.origin
    if cls is AgentConfig:
        _check_agent(values, prefix, origin)
    if cls is WorkerConfig:
        _check_worker(values, prefix, origin)
    if cls is PipelineConfig:
        _check_pipeline(values, prefix, origin)
    if cls is KafkaSecurityConfig:
        _check_kafka_security(values, prefix, origin)
    if cls is CassandraConfig:
        _check_cassandra(values, prefix, origin)
    if cls is CassandraTlsConfig:
        _check_cassandra_tls(values, prefix, origin)
    return cls(**values)


def _coerce(hint: Any, value: Any, key: str, sources: _Sources) -> Any:
    source = sources.of(key)
    origin_type = get_origin(hint)
    args = get_args(hint)
    if origin_type in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _coerce(inner, value, key, sources)
    if hint is Any:
        return value
    if isinstance(hint, type) and is_dataclass(hint):
        return _build(hint, value, key + ".", sources)
    try:
        if hint is Secret:
            # never `got {value!r}` here: the value is the secret
            text = sources.raw.get(key, value)
            if not isinstance(text, str):
                raise ValueError(
                    f"expected text, got a {type(text).__name__}; quote the value in YAML ('...') so it is "
                    "read exactly, or give it as ${ENV_VAR} or file:/path"
                )
            if not text:
                raise ValueError("expected a secret, got empty text")
            return Secret.resolve(text, sources.environ)
        if origin_type is Literal:
            if value not in args:
                raise ValueError(f"expected one of {', '.join(map(str, args))}, got {value!r}")
            return value
        if origin_type is list:
            items = (
                value if isinstance(value, list) else [v.strip() for v in str(value).split(",") if v.strip()]
            )
            return [_coerce(args[0], item, key, sources) for item in items]
        if origin_type is dict:
            if not isinstance(value, dict):
                raise ValueError(f"expected a mapping, got {value!r}")
            return value
        if hint is ByteSize:
            size = parse_size(value)
            if size <= 0:
                raise ValueError(f"expected a positive size, got {value!r}")
            return ByteSize(size)
        if hint is bool:
            if not isinstance(value, bool):
                raise ValueError(f"expected true or false, got {value!r}")
            return value
        if hint is int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"expected a whole number, got {value!r}")
            if value < 0:
                raise ValueError(f"expected a number >= 0, got {value}")
            return value
        if hint is Path:
            if not isinstance(value, str) or not value:
                raise ValueError(f"expected a path, got {value!r}")
            return Path(value).expanduser()
        if hint is str:
            if isinstance(value, dict | list) or value is None:
                raise ValueError(f"expected text, got {value!r}")
            return str(value)
    except ValueError as exc:
        raise ConfigError(f"config key {key} ({source}): {exc}") from None
    raise ConfigError(f"config key {key}: unsupported type {hint}")


def _check_agent(values: dict[str, Any], prefix: str, origin: dict[str, str]) -> None:
    """Checks across keys; each error names where the offending value came from (file or variable)."""

    def source(name: str) -> str:
        return origin.get(prefix + name, "file")

    if values.get("processed_segments") == "archive" and values.get("archive_directory") is None:
        raise ConfigError(
            f"config key {prefix}archive_directory is required when {prefix}processed_segments is 'archive' "
            f"({source('processed_segments')})"
        )
    for name in ("poll_interval_ms", "offset_flush_interval_ms", "schema_refresh_interval_s"):
        if name in values and values[name] == 0:
            raise ConfigError(f"config key {prefix}{name} must be greater than 0 ({source(name)})")
    port = values.get("metrics_port")
    if port is not None and not 0 <= port <= 65535:
        raise ConfigError(
            f"config key {prefix}metrics_port: {port} is not a TCP port ({source('metrics_port')})"
        )


def _check_worker(values: dict[str, Any], prefix: str, origin: dict[str, str]) -> None:
    def source(name: str) -> str:
        return origin.get(prefix + name, "file")

    if values.get("encoding") == "avro" and not values.get("schema_registry_url"):
        raise ConfigError(
            f"config key {prefix}schema_registry_url is required when {prefix}encoding is 'avro' "
            f"({source('encoding')})"
        )
    for name in (
        "clean_partitions", "batch_max_events", "expiry_interval_ms", "transaction_timeout_ms", "outage_timeout_s"
    ):  # fmt: skip
        if name in values and values[name] == 0:
            raise ConfigError(f"config key {prefix}{name} must be greater than 0 ({source(name)})")
    standby = values.get("standby_replicas")
    if standby is not None and standby not in (0, 1):
        raise ConfigError(
            f"config key {prefix}standby_replicas: {standby} is not 0 (no copies) or 1 (a warm copy of every "
            f"raw partition the worker does not own) ({source('standby_replicas')})"
        )
    port = values.get("web_port")
    if port is not None and not 0 <= port <= 65535:
        raise ConfigError(f"config key {prefix}web_port: {port} is not a TCP port ({source('web_port')})")
    app_id = values.get("app_id")
    if app_id is not None and not re.fullmatch(r"[A-Za-z0-9._-]+", app_id):
        raise ConfigError(
            f"config key {prefix}app_id: {app_id!r} must use only letters, digits, '.', '_' and '-' "
            f"(it names Kafka topics) ({source('app_id')})"
        )
    floor = values.get("tombstone_floor_s")
    if floor is not None and not values.get("allow_short_tombstone_floor"):
        horizon = values.get(
            "digest_horizon_s", next(f.default for f in fields(WorkerConfig) if f.name == "digest_horizon_s")
        )
        if floor < horizon:
            raise ConfigError(
                f"config key {prefix}tombstone_floor_s: {floor} s is below {prefix}digest_horizon_s "
                f"({horizon} s), so a copy merged again after its digest is forgotten could bring a deleted "
                f"row back; raise it, or set {prefix}allow_short_tombstone_floor: true if no copy can be that "
                f"late ({source('tombstone_floor_s')})"
            )


def _check_pipeline(values: dict[str, Any], prefix: str, origin: dict[str, str]) -> None:
    def source(name: str) -> str:
        return origin.get(prefix + name, "file")

    for name in ("shuffle_partitions", "trigger_interval_s", "max_offsets_per_trigger", "bootstrap_splits",
                 "scan_page_size"):  # fmt: skip
        if name in values and values[name] == 0:
            raise ConfigError(f"config key {prefix}{name} must be greater than 0 ({source(name)})")
    memory = values.get("driver_memory")
    if memory is not None and not re.fullmatch(r"[1-9][0-9]*[kmgKMG]", memory):
        raise ConfigError(
            f"config key {prefix}driver_memory: {memory!r} must look like 512m or 2g ({source('driver_memory')})"
        )
    conf = values.get("spark_conf")
    if conf is not None:
        for name, value in conf.items():
            if not isinstance(name, str) or not name.startswith("spark."):
                raise ConfigError(
                    f"config key {prefix}spark_conf: {name!r} is not a Spark setting (spark.*) "
                    f"({source('spark_conf')})"
                )
            if name == "spark.master":
                raise ConfigError(
                    f"config key {prefix}spark_conf: set the master with {prefix}master, not spark.master "
                    f"({source('spark_conf')})"
                )
            if isinstance(value, dict | list) or value is None:
                raise ConfigError(
                    f"config key {prefix}spark_conf.{name}: expected a value, got {value!r} "
                    f"({source('spark_conf')})"
                )
            conf[name] = str(value).lower() if isinstance(value, bool) else str(value)
    if values.get("encoding") == "avro" and values.get("schema_registry_url") == "":
        raise ConfigError(
            f"config key {prefix}schema_registry_url is empty ({source('schema_registry_url')})"
        )
    master = values.get("master")
    if master is not None and not re.fullmatch(r"local(\[(\*|[1-9][0-9]*)\])?|(spark|yarn|k8s)\S*", master):
        raise ConfigError(
            f"config key {prefix}master: {master!r} is not a Spark master (local[2], spark://host:7077, yarn) "
            f"({source('master')})"
        )


_TLS_KEYS = ("ca_file", "cert_file", "key_file", "key_password")


def _check_readable_file(path: Path, key: str, source: str) -> None:
    """A PEM file a client will load: it must exist and be readable now, not at the first connection."""
    try:
        with path.open("rb"):
            pass
    except FileNotFoundError:
        raise ConfigError(f"config key {key} ({source}): file {path} does not exist") from None
    except IsADirectoryError:
        raise ConfigError(f"config key {key} ({source}): {path} is a directory, not a file") from None
    except PermissionError:
        raise ConfigError(
            f"config key {key} ({source}): file {path} is not readable by this user (permission denied)"
        ) from None
    except OSError as exc:
        raise ConfigError(f"config key {key} ({source}): cannot read {path}: {exc.strerror}") from None


def _check_client_certificate(values: dict[str, Any], prefix: str, origin: dict[str, str]) -> None:
    """cert_file and key_file go together; key_password needs key_file; every file is readable."""

    def source(name: str) -> str:
        return origin.get(prefix + name, "file")

    cert, key = values.get("cert_file"), values.get("key_file")
    if cert is not None and key is None:
        raise ConfigError(
            f"config key {prefix}key_file is required with {prefix}cert_file (the client certificate's "
            f"private key, PEM) ({source('cert_file')})"
        )
    if key is not None and cert is None:
        raise ConfigError(
            f"config key {prefix}cert_file is required with {prefix}key_file (the client certificate, PEM) "
            f"({source('key_file')})"
        )
    if values.get("key_password") is not None and key is None:
        raise ConfigError(
            f"config key {prefix}key_password is set but {prefix}key_file is not ({source('key_password')})"
        )
    for name in ("ca_file", "cert_file", "key_file"):
        if values.get(name) is not None:
            _check_readable_file(values[name], prefix + name, source(name))


def _check_kafka_security(values: dict[str, Any], prefix: str, origin: dict[str, str]) -> None:
    def source(name: str) -> str:
        return origin.get(prefix + name, "file")

    protocol = values.get("protocol", "PLAINTEXT")
    if protocol in SASL_PROTOCOLS:
        allowed = {"sasl_mechanism": f" (one of {', '.join(get_args(SaslMechanism))})", "username": "",
                   "password": " (inline, ${ENV_VAR} or file:/path)"}  # fmt: skip
        for name, hint in allowed.items():
            if values.get(name) is None:
                raise ConfigError(
                    f"config key {prefix}{name} is required when {prefix}protocol is {protocol!r}{hint} "
                    f"({source('protocol')})"
                )
    else:
        for name in ("sasl_mechanism", "username", "password"):
            if values.get(name) is not None:
                raise ConfigError(
                    f"config key {prefix}{name} is set but {prefix}protocol is {protocol!r}, which does not "
                    f"authenticate: set {prefix}protocol to SASL_SSL (or SASL_PLAINTEXT), or remove "
                    f"{prefix}{name} ({source(name)})"
                )
    if protocol not in TLS_PROTOCOLS:
        for name in _TLS_KEYS:
            if values.get(name) is not None:
                raise ConfigError(
                    f"config key {prefix}{name} is set but {prefix}protocol is {protocol!r}, which does not "
                    f"use TLS: set {prefix}protocol to SSL or SASL_SSL, or remove {prefix}{name} "
                    f"({source(name)})"
                )
    _check_client_certificate(values, prefix, origin)


def _check_cassandra(values: dict[str, Any], prefix: str, origin: dict[str, str]) -> None:
    def source(name: str) -> str:
        return origin.get(prefix + name, "file")

    for name, other in (("username", "password"), ("password", "username")):
        if values.get(name) is not None and values.get(other) is None:
            raise ConfigError(
                f"config key {prefix}{other} is required with {prefix}{name} (PasswordAuthenticator) "
                f"({source(name)})"
            )


def _check_cassandra_tls(values: dict[str, Any], prefix: str, origin: dict[str, str]) -> None:
    def source(name: str) -> str:
        return origin.get(prefix + name, "file")

    if not values.get("enabled", False):
        for name in _TLS_KEYS:
            if values.get(name) is not None:
                raise ConfigError(
                    f"config key {prefix}{name} is set but {prefix}enabled is false: set {prefix}enabled "
                    f"to true, or remove {prefix}{name} ({source(name)})"
                )
    _check_client_certificate(values, prefix, origin)


def dump_config(value: Any) -> Any:
    """The config (or a section of it) as plain YAML/JSON data, every secret shown as `***`."""
    if isinstance(value, Secret):
        return MASK
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: dump_config(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, dict):
        return {str(k): dump_config(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [dump_config(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float | str):
        return value
    return str(value)
