"""The demo's table, `demo.readings WITH cdc = true`, and the driver connection that creates it."""

from __future__ import annotations

import logging

from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile, Session

from runtime.cassandra_session import cassandra_cluster
from runtime.config import CassandraConfig

KEYSPACE = "demo"
TABLE = "readings"
COLUMNS = {"sensor": "text", "at": "timestamp", "value": "double", "status": "text", "tags": "set<text>"}
KEY_COLUMNS = ("sensor", "at")


def connect_cluster(cassandra: CassandraConfig) -> Cluster:
    """The demo's driver Cluster: the config's contact points, port, login and TLS."""
    logging.getLogger("cassandra").setLevel(logging.ERROR)
    return cassandra_cluster(
        cassandra,
        protocol_version=5,
        execution_profiles={EXEC_PROFILE_DEFAULT: ExecutionProfile(request_timeout=30.0)},
        connect_timeout=10,
    )


def prepare_table(session: Session, cluster: Cluster) -> str:
    """Keyspace (RF 1) and table WITH cdc = true; a table of another shape (an older demo's) is replaced."""
    session.execute(
        f"CREATE KEYSPACE IF NOT EXISTS {KEYSPACE} "
        "WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}"
    )
    where = "WHERE keyspace_name = %s AND table_name = %s"
    found = {
        r.column_name: r.type
        for r in session.execute(
            f"SELECT column_name, type FROM system_schema.columns {where}", (KEYSPACE, TABLE)
        )
    }
    what = "existing"
    if found and found != COLUMNS:
        session.execute(f"DROP TABLE {KEYSPACE}.{TABLE}")
        what, found = "recreated: an older demo's had other columns", {}
    if not found:
        columns = ", ".join(f"{name} {kind}" for name, kind in COLUMNS.items())
        session.execute(
            f"CREATE TABLE IF NOT EXISTS {KEYSPACE}.{TABLE} ({columns}, PRIMARY KEY (sensor, at)) WITH cdc = true"
        )
        what = "created" if what == "existing" else what
    elif not session.execute(f"SELECT cdc FROM system_schema.tables {where}", (KEYSPACE, TABLE)).one().cdc:
        session.execute(f"ALTER TABLE {KEYSPACE}.{TABLE} WITH cdc = true")
    cluster.control_connection.wait_for_schema_agreement()
    return what
