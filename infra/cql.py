"""Small CQL probes used by readiness checks, pinned to one node so they test that node only."""

from __future__ import annotations

import logging
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from cassandra import AuthenticationFailed
from cassandra.auth import PlainTextAuthProvider
from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile, NoHostAvailable
from cassandra.policies import WhiteListRoundRobinPolicy

_probe = threading.local()


class _QuietProbe(logging.Filter):
    """Drops the driver's records of the thread running a probe, whose failure is an answer, not an error."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(_probe, "quiet", False)


for _name in ("cassandra.cluster", "cassandra.connection", "cassandra.pool"):
    logging.getLogger(_name).addFilter(_QuietProbe())


@contextmanager
def quiet_probe() -> Iterator[None]:
    """Within the block, a refused login or a node not up yet leaves no ERROR record with a traceback."""
    previous = getattr(_probe, "quiet", False)
    _probe.quiet = True
    try:
        yield
    finally:
        _probe.quiet = previous


@dataclass(slots=True, frozen=True)
class Login:
    """How to reach a node that wants a password and TLS (secure mode)."""

    username: str
    password: str
    ssl_context: ssl.SSLContext

    def __repr__(self) -> str:
        return f"Login(username={self.username!r}, password=***)"


def connect(
    address: str, port: int = 9042, *, timeout_s: float = 10.0, login: Login | None = None
) -> Cluster:
    """A driver Cluster that talks to exactly one node (no peer discovery load balancing)."""
    logging.getLogger("cassandra").setLevel(logging.ERROR)
    profile = ExecutionProfile(
        load_balancing_policy=WhiteListRoundRobinPolicy([address]), request_timeout=30.0
    )
    secure: dict[str, object] = {}
    if login is not None:
        secure = {
            "auth_provider": PlainTextAuthProvider(username=login.username, password=login.password),
            "ssl_context": login.ssl_context,
        }
    return Cluster(
        [address],
        port=port,
        execution_profiles={EXEC_PROFILE_DEFAULT: profile},
        connect_timeout=timeout_s,
        control_connection_timeout=timeout_s,
        protocol_version=5,
        **secure,
    )


def query_release_version(address: str, port: int = 9042, *, login: Login | None = None) -> str | None:
    """Cassandra's release version when the node answers CQL, else None."""
    cluster = connect(address, port, timeout_s=5.0, login=login)
    try:
        with quiet_probe():
            session = cluster.connect()
            row = session.execute("SELECT release_version FROM system.local", timeout=5.0).one()
        return row.release_version if row else None
    except (NoHostAvailable, OSError, Exception):
        return None
    finally:
        cluster.shutdown()


def is_authentication_failure(error: BaseException) -> bool:
    """The node answered but refused the credentials (as opposed to not answering at all)."""
    if isinstance(error, AuthenticationFailed):
        return True
    if isinstance(error, NoHostAvailable):
        return any(isinstance(e, AuthenticationFailed) for e in error.errors.values())
    return False
