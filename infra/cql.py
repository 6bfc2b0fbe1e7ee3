"""Small CQL probes used by readiness checks, pinned to one node so they test that node only."""

from __future__ import annotations

import logging

from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile, NoHostAvailable
from cassandra.policies import WhiteListRoundRobinPolicy


def connect(address: str, port: int = 9042, *, timeout_s: float = 10.0) -> Cluster:
    """A driver Cluster that talks to exactly one node (no peer discovery load balancing)."""
    logging.getLogger("cassandra").setLevel(logging.ERROR)
    profile = ExecutionProfile(
        load_balancing_policy=WhiteListRoundRobinPolicy([address]), request_timeout=30.0
    )
    return Cluster(
        [address],
        port=port,
        execution_profiles={EXEC_PROFILE_DEFAULT: profile},
        connect_timeout=timeout_s,
        control_connection_timeout=timeout_s,
        protocol_version=5,
    )


def query_release_version(address: str, port: int = 9042) -> str | None:
    """Cassandra's release version when the node answers CQL, else None."""
    cluster = connect(address, port, timeout_s=5.0)
    try:
        session = cluster.connect()
        row = session.execute("SELECT release_version FROM system.local", timeout=5.0).one()
        return row.release_version if row else None
    except (NoHostAvailable, OSError, Exception):
        return None
    finally:
        cluster.shutdown()
