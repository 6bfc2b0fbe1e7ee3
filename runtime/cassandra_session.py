"""The one way to make a cassandra-driver Cluster, so none can forget `cassandra.username/password/tls`.

Hostname checking: with an SSLContext whose check_hostname is on, cassandra-driver 3.30 passes each
connection's own address as server_hostname (PYTHON-1186, Connection._wrap_socket_from_context), so every
node, contact point or discovered peer, is checked against its own address. A fixed
`ssl_options={'server_hostname': ...}` would check every node against one name, so none is set.
"""

from __future__ import annotations

import ssl
from collections.abc import Sequence
from typing import Any

from cassandra import AuthenticationFailed, OperationTimedOut
from cassandra.auth import PlainTextAuthenticator, PlainTextAuthProvider
from cassandra.cluster import Cluster, NoHostAvailable
from cassandra.connection import ConnectionException

from runtime.config import CassandraConfig
from runtime.secrets import Secret, scrub
from runtime.tls import ClientSetupError, as_ssl_error, client_ssl_context, explain_tls_failure

TLS_PREFIX = "cassandra.tls."
#: Cluster arguments that only the config may set
SECURITY_ARGUMENTS = frozenset({"auth_provider", "ssl_context", "ssl_options"})


class SecretAuthProvider(PlainTextAuthProvider):
    """PasswordAuthenticator credentials that keep the password a Secret until a connection asks."""

    def __init__(self, username: str, password: Secret) -> None:
        super().__init__(username=username, password=None)
        self._secret = password

    def new_authenticator(self, host: Any) -> PlainTextAuthenticator:
        return PlainTextAuthenticator(self.username, self._secret.reveal())

    def __repr__(self) -> str:
        return f"SecretAuthProvider(username={self.username!r}, password=***)"


def cassandra_ssl_context(cassandra: CassandraConfig) -> ssl.SSLContext | None:
    tls = cassandra.tls
    if not tls.enabled:
        return None
    return client_ssl_context(
        prefix=TLS_PREFIX,
        ca_file=tls.ca_file,
        cert_file=tls.cert_file,
        key_file=tls.key_file,
        key_password=tls.key_password,
        check_hostname=tls.check_hostname,
    )


def cassandra_auth_provider(cassandra: CassandraConfig) -> SecretAuthProvider | None:
    if cassandra.username is None and cassandra.password is None:
        return None
    if cassandra.username is None or cassandra.password is None:
        missing = "username" if cassandra.username is None else "password"
        raise ClientSetupError(
            f"config key cassandra.{missing} is required with the other (PasswordAuthenticator)"
        )
    return SecretAuthProvider(cassandra.username, cassandra.password)


def cassandra_cluster(
    cassandra: CassandraConfig,
    *,
    contact_points: Sequence[str] | None = None,
    port: int | None = None,
    **extra: Any,
) -> Cluster:
    """A driver Cluster (not connected) with the config's credentials and TLS.

    `contact_points` and `port` default to the config's; `extra` are the call site's own Cluster arguments
    (protocol_version, execution_profiles, timeouts...), but never auth_provider, ssl_context, ssl_options.
    """
    clash = sorted(SECURITY_ARGUMENTS & set(extra))
    if clash:
        raise TypeError(
            f"{', '.join(clash)} come from the cassandra section of the config, not the call site"
        )
    secure: dict[str, Any] = {}
    provider = cassandra_auth_provider(cassandra)
    if provider is not None:
        secure["auth_provider"] = provider
    context = cassandra_ssl_context(cassandra)
    if context is not None:
        secure["ssl_context"] = context
    return Cluster(
        list(contact_points if contact_points is not None else cassandra.contact_points),
        port=cassandra.port if port is None else port,
        **secure,
        **extra,
    )


def explain_cassandra_error(exc: BaseException, cassandra: CassandraConfig) -> str | None:
    """An actionable message when Cassandra refused the credentials or TLS failed, naming the setting;
    None when `exc` is something else. NoHostAvailable is looked into (one reason per node)."""
    if isinstance(exc, ClientSetupError):
        return str(exc)
    if isinstance(exc, NoHostAvailable):
        reasons = []
        for endpoint, error in (exc.errors or {}).items():
            reason = _explain_one(error, cassandra, str(endpoint))
            if reason is not None and reason not in reasons:
                reasons.append(reason)
        message = "; ".join(reasons) if reasons else None
    else:
        message = _explain_one(
            exc, cassandra, ", ".join(f"{h}:{cassandra.port}" for h in cassandra.contact_points)
        )
    if message is None:
        return None
    return scrub(message, (cassandra.password, cassandra.tls.key_password))


def _explain_one(exc: BaseException, cassandra: CassandraConfig, endpoint: str) -> str | None:
    if isinstance(exc, AuthenticationFailed):
        text = str(exc)
        if "requires authentication" in text:
            return (
                f"Cassandra at {endpoint} requires a login (PasswordAuthenticator): set cassandra.username and "
                "cassandra.password"
            )
        source = cassandra.password.source if cassandra.password else "nowhere"
        return (
            f"Cassandra at {endpoint} refused the login of role {cassandra.username!r}: wrong password or unknown "
            f"role; check cassandra.username and cassandra.password (its value comes from {source})"
        )
    tls = cassandra.tls
    if tls.enabled:
        message = explain_tls_failure(
            exc, prefix=TLS_PREFIX, endpoint=endpoint, tls_key=f"{TLS_PREFIX}enabled", ca_file=tls.ca_file
        )
        tls_error = as_ssl_error(exc)
        if message is None and isinstance(tls_error, ssl.SSLError):
            message = f"TLS with Cassandra at {endpoint} failed ({tls_error.reason or tls_error}); see {TLS_PREFIX}*"
        return message
    if _closed_early(exc):
        return (
            f"Cassandra at {endpoint} closed the connection during the handshake: if the node requires TLS "
            f"(client_encryption_options), set {TLS_PREFIX}enabled: true (and {TLS_PREFIX}ca_file)"
        )
    return None


def _closed_early(exc: BaseException) -> bool:
    if isinstance(exc, ConnectionResetError):
        return True
    if isinstance(exc, ConnectionException | OperationTimedOut):
        return "closed" in str(exc) or "reset" in str(exc).lower()
    return False
