"""The table schemas the agent decodes with: read from Cassandra, refreshed on change, published.

The catalog only grows: a reload merges the node's current system_schema into it, so mutations of a
table that was dropped (still in older segments) keep decoding. Every CDC table's definition is
published to the compacted schema topic whenever it changes (ALTER, new table) or is dropped.

The driver Cluster comes from runtime.cassandra_session (`cassandra.username/password/tls`). A failed
reload whose cause the config must fix (refused login, TLS) leaves its actionable message in `problem`.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from enum import Enum

from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile, Session
from cassandra.policies import WhiteListRoundRobinPolicy

from agents.commitlog.errors import CommitLogError, MutationDecodeError, UnknownColumnError
from agents.metrics import AgentMetrics
from cassandra_model.errors import ModelError, UnknownTableError
from cassandra_model.schema_cql import table_to_cql
from cassandra_model.system_schema import load_schema_from_session
from cassandra_model.table_schema import SchemaCatalog, TableSchema
from runtime.cassandra_session import cassandra_cluster, explain_cassandra_error
from runtime.config import CassandraConfig
from runtime.secrets import scrub
from schemas.schema_event import SchemaEvent, schema_event

log = logging.getLogger(__name__)

#: a schema miss triggers at most one reload per this many seconds (a dropped table's mutations recur)
MIN_RELOAD_INTERVAL_S = 2.0
#: how far the clock of a DDL's coordinator may run behind this node's for ``SchemaSource.covers``
SCHEMA_CLOCK_MARGIN_US = 10_000_000
#: how long reading waits for the node's schema to learn a column its commit log already holds cells of
UNKNOWN_COLUMN_WAIT_S = 600.0

_connecting = threading.local()


class _QuietConnect(logging.Filter):
    """Drops the driver's records (an ERROR with a traceback per failed connect) of the thread inside
    `_connect`: reload() reports that failure itself, with the config key to fix when there is one."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(_connecting, "active", False)


for _name in ("cassandra.cluster", "cassandra.connection", "cassandra.pool"):
    logging.getLogger(_name).addFilter(_QuietConnect())


class MissAction(Enum):
    """What to do with an entry whose table or column the catalog does not know."""

    RETRY = "retry"  # the catalog was just reloaded: decode the entry again
    WAIT = "wait"  # stop before the entry and try again later (Cassandra unreachable, reload too recent)
    GIVE_UP = "give_up"  # unknown even after a reload that followed it: count it and go on


class SchemaSource:
    def __init__(
        self,
        config: CassandraConfig,
        *,
        cluster_name: str,
        metrics: AgentMetrics,
        unknown_column_wait_s: float = UNKNOWN_COLUMN_WAIT_S,
    ) -> None:
        self.config = config
        self.unknown_column_wait_s = unknown_column_wait_s
        self.cluster_name = cluster_name
        self.metrics = metrics
        self.catalog = SchemaCatalog()
        self._cluster: Cluster | None = None
        self._session: Session | None = None
        self._published: dict[uuid.UUID, str] = {}
        self._last_reload = 0.0
        #: wall time (µs) when the last successful reload began: DDL applied before it is in the catalog
        self.loaded_as_of_us: int | None = None
        self._dropped: set[uuid.UUID] = set()
        self._misses: dict[str, float] = {}
        #: unknown columns being waited for: ``<keyspace>.<table>.<column>`` -> (first miss, last miss)
        self._column_waits: dict[str, tuple[float, float]] = {}
        self.reachable = False
        self.problem: str | None = None
        """Why the last reload failed, when the config must change (names the key; no secret); else None."""

    def _connect(self) -> Session:
        if self._session is None:
            logging.getLogger("cassandra").setLevel(logging.ERROR)
            # Queries go to the contact points only (the agent's own node), never round-robin over the
            # cluster: one reload's queries must see one schema version, and nodes apply DDL at different
            # moments (a mixed read showed a dropped column as dropped and re-added).
            profile = ExecutionProfile(
                load_balancing_policy=WhiteListRoundRobinPolicy(self.config.contact_points)
            )
            cluster = cassandra_cluster(self.config, protocol_version=5,
                                        execution_profiles={EXEC_PROFILE_DEFAULT: profile},
                                        connect_timeout=5, control_connection_timeout=5)  # fmt: skip
            _connecting.active = True
            try:
                self._session = cluster.connect()
            except Exception:
                cluster.shutdown()
                raise
            finally:
                _connecting.active = False
            self._cluster = cluster
        return self._session

    def reload(self) -> bool:
        """Merge the node's current schema into the catalog; False (logged) when Cassandra does not answer."""
        self._last_reload = time.monotonic()
        began_us = time.time_ns() // 1000
        self.problem = None
        try:
            session = self._connect()
            # Every keyspace, even with `keyspaces` set: a table the catalog lacks reads as "created after
            # the last load" and stalls reading for a reload; `captured` applies the keyspace filter.
            fresh = load_schema_from_session(session)
        except (CommitLogError, ModelError) as exc:
            log.error("schema from Cassandra does not load: %s", exc)
            self.reachable = True
            return False
        except Exception as exc:  # driver errors of every kind mean "not reachable now"
            self.reachable = False
            self.problem = explain_cassandra_error(exc, self.config)
            if self.problem is not None:
                log.warning("Cassandra refuses the agent: %s", self.problem)
            else:
                log.warning("Cassandra at %s not answering schema queries (%s)", self.config.contact_points,
                            scrub(str(exc), (self.config.password, self.config.tls.key_password)))  # fmt: skip
            return False
        self.reachable = True
        dropped = {t.table_id for t in self.catalog.tables()} - {t.table_id for t in fresh.tables()}
        self.catalog.merge(fresh)
        self._dropped |= dropped
        self.loaded_as_of_us = began_us
        self.metrics.schema_reloads.inc()
        return True

    def covers(self, ddl_timestamp_us: int | None) -> bool:
        """Whether the catalog already holds a schema change the log shows with this timestamp: it was
        applied on the node before it was logged, and so before a reload that began later. The margin
        (SCHEMA_CLOCK_MARGIN_US) allows for the clock of the coordinator that stamped the DDL; a backlog's
        schema changes (a fresh node logs dozens) then cost no reload each."""
        return (
            ddl_timestamp_us is not None
            and self.loaded_as_of_us is not None
            and ddl_timestamp_us < self.loaded_as_of_us - SCHEMA_CLOCK_MARGIN_US
        )

    def resolve_miss(self, error: MutationDecodeError) -> MissAction:
        """Decoder hook for an unknown table or column (a table created or altered after the last load).

        Reloads at most every MIN_RELOAD_INTERVAL_S; gives up on a table only when a reload made after it
        was first missed still does not know it (e.g. a dropped table whose mutations are still in the log),
        on a column of a known table only after ``unknown_column_wait_s`` (``_wait_for_column``).
        """
        if isinstance(error, UnknownColumnError):
            return self._wait_for_column(error)
        if not isinstance(error, UnknownTableError):
            return MissAction.GIVE_UP
        key = error.reason
        missed_at = self._misses.get(key)
        if missed_at is not None and self._last_reload > missed_at:
            return MissAction.GIVE_UP
        if time.monotonic() - self._last_reload < MIN_RELOAD_INTERVAL_S:
            self._misses.setdefault(key, time.monotonic())
            return MissAction.WAIT
        self._misses[key] = time.monotonic()
        log.info("reloading the schema: %s", error.reason)
        return MissAction.RETRY if self.reload() else MissAction.WAIT

    def _wait_for_column(self, error: UnknownColumnError) -> MissAction:
        """A column of a known table that the node's schema lacks. A node that missed an `ALTER TABLE ...
        ADD` while it was down logs the new column's cells before its schema has caught up (observed: three
        minutes after a kill -9), so one reload is not enough: reading stops before the entry and the
        schema is reloaded every MIN_RELOAD_INTERVAL_S, for up to ``unknown_column_wait_s``; only then is
        the entry given up (quarantined and counted)."""
        key = error.column or error.reason
        now = time.monotonic()
        first, last = self._column_waits.get(key, (now, now))
        if now - last > 10 * MIN_RELOAD_INTERVAL_S:  # not missed lately: a new wait, not the old one's end
            first = now
        self._column_waits[key] = (first, now)
        if now - first >= self.unknown_column_wait_s:
            log.error("giving up on an entry after waiting %.0f s for the node's schema to know column %s: %s",
                      now - first, key, error.reason)  # fmt: skip
            return MissAction.GIVE_UP
        if now - self._last_reload < MIN_RELOAD_INTERVAL_S:
            return MissAction.WAIT
        if first == now:
            log.warning("the node's schema lacks column %s (reading waits before the entry, up to %.0f s): %s",
                        key, self.unknown_column_wait_s, error.reason)  # fmt: skip
        return MissAction.RETRY if self.reload() else MissAction.WAIT

    def captured(self, table: TableSchema) -> bool:
        """Whether the agent publishes this table's mutations."""
        if not table.cdc:
            return False
        return not self.config.keyspaces or table.keyspace in self.config.keyspaces

    def captured_tables(self) -> list[str]:
        """`keyspace.table` of every captured table that exists now (not dropped), sorted."""
        return sorted(
            {
                f"{t.keyspace}.{t.table}"
                for t in self.catalog.tables()
                if self.captured(t) and t.table_id not in self._dropped
            }
        )

    def cdc_block_writes(self) -> bool | None:
        """The node's current `cdc_block_writes` (from `system_views.settings`); None when unknown."""
        try:
            row = (
                self._connect()
                .execute("SELECT value FROM system_views.settings WHERE name = 'cdc_block_writes'", timeout=5)
                .one()
            )
        except Exception as exc:  # driver errors of every kind: the answer is unknown
            log.warning("cannot read cdc_block_writes from system_views.settings: %s",
                        scrub(str(exc), (self.config.password, self.config.tls.key_password)))  # fmt: skip
            return None
        return None if row is None or row.value is None else str(row.value).strip().lower() == "true"

    def pending_events(self) -> list[SchemaEvent]:
        """Schema events for captured tables that are new, changed or dropped since the last call."""
        events = []
        for table in self.catalog.tables():
            if not self.captured(table):
                continue
            is_dropped = table.table_id in self._dropped
            text = table_to_cql(table)
            version = text + ("\n-- dropped" if is_dropped else "")
            if self._published.get(table.table_id) == version:
                continue
            events.append(
                schema_event(
                    self.cluster_name,
                    table.keyspace,
                    table.table,
                    str(table.table_id),
                    cdc=table.cdc,
                    dropped=is_dropped,
                    cql=text,
                )
            )
            self._published[table.table_id] = version
        return events

    def close(self) -> None:
        if self._cluster is not None:
            self._cluster.shutdown()
            self._cluster = None
            self._session = None
