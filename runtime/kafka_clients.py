"""The one way to make a Kafka client (aiokafka, Faust), so none can forget `kafka.security`.

- `kafka_client_options(kafka)`: aiokafka keyword arguments (servers, timeout, TLS context, SASL);
  `make_producer`, `make_consumer`, `make_admin` wrap them, and refuse security arguments of their own.
- `faust_broker(kafka)`: the broker URLs and `broker_credentials` for `faust.App`.
- `explain_kafka_error(exc, kafka)`: an actionable message naming the `kafka.security` key to fix.
  aiokafka logs the reason a bootstrap failed and raises only "Unable to bootstrap from ...", so
  `diagnose_kafka(kafka)` connects to each bootstrap server itself to find that reason, and
  `start_kafka_client(client, kafka)` does it when a client does not start.

The Spark jobs' options are in runtime/spark_kafka.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import (
    IllegalSaslStateError,
    KafkaConnectionError,
    KafkaError,
    SaslAuthenticationFailed,
    UnsupportedSaslMechanismError,
)

from runtime.config import KafkaConfig, KafkaSecurityConfig
from runtime.secrets import MASK, scrub
from runtime.tls import ClientSetupError, client_ssl_context, explain_tls_failure

if TYPE_CHECKING:
    from faust.types.auth import CredentialsT

log = logging.getLogger(__name__)

PREFIX = "kafka.security."
#: how long a client may take to stop before its connections are closed under it
STOP_TIMEOUT_S = 5.0
#: aiokafka arguments that only kafka.security may set
SECURITY_ARGUMENTS = frozenset(
    {"security_protocol", "ssl_context", "sasl_mechanism", "sasl_plain_username", "sasl_plain_password",
     "sasl_kerberos_service_name", "sasl_kerberos_domain_name", "sasl_oauth_token_provider"}
)  # fmt: skip
_HIDDEN = frozenset({"sasl_plain_password"})


class KafkaAccessError(KafkaConnectionError):
    """A Kafka client could not connect, with the reason and the setting to change (no secret)."""


class ClientOptions(dict[str, Any]):
    """Keyword arguments for a client; prints the password as `***` (the dict itself holds it)."""

    def __repr__(self) -> str:
        return repr({k: (MASK if k in _HIDDEN and v is not None else v) for k, v in self.items()})

    __str__ = __repr__


def kafka_ssl_context(security: KafkaSecurityConfig) -> ssl.SSLContext | None:
    """The TLS context for SSL and SASL_SSL (None otherwise); ClientSetupError names the key at fault."""
    if not security.tls:
        return None
    return client_ssl_context(
        prefix=PREFIX,
        ca_file=security.ca_file,
        cert_file=security.cert_file,
        key_file=security.key_file,
        key_password=security.key_password,
        check_hostname=security.check_hostname,
    )


def _check_sasl(security: KafkaSecurityConfig) -> None:
    """The load-time checks again, for configs built in code rather than loaded."""
    if security.sasl:
        for name in ("sasl_mechanism", "username", "password"):
            if getattr(security, name) is None:
                raise ClientSetupError(
                    f"config key {PREFIX}{name} is required when {PREFIX}protocol is {security.protocol!r}"
                )


def kafka_client_options(kafka: KafkaConfig) -> ClientOptions:
    """aiokafka keyword arguments every producer, consumer and admin client of the project starts from."""
    security = kafka.security
    _check_sasl(security)
    options = ClientOptions(
        bootstrap_servers=kafka.bootstrap_servers,
        request_timeout_ms=kafka.request_timeout_ms,
        security_protocol=security.protocol,
    )
    context = kafka_ssl_context(security)
    if context is not None:
        options["ssl_context"] = context
    if security.sasl:
        assert security.password is not None
        options["sasl_mechanism"] = security.sasl_mechanism
        options["sasl_plain_username"] = security.username
        options["sasl_plain_password"] = security.password.reveal()
    return options


def _merged(kafka: KafkaConfig, extra: dict[str, Any]) -> ClientOptions:
    clash = sorted(SECURITY_ARGUMENTS & set(extra))
    if clash:
        raise TypeError(f"{', '.join(clash)} come from kafka.security in the config, not from the call site")
    options = kafka_client_options(kafka)
    options.update(extra)
    return options


def make_producer(kafka: KafkaConfig, **extra: Any) -> AIOKafkaProducer:
    """An AIOKafkaProducer (not started; make it inside the running loop) with the config's security."""
    return AIOKafkaProducer(**_merged(kafka, extra))


def make_consumer(kafka: KafkaConfig, *topics: str, **extra: Any) -> AIOKafkaConsumer:
    """An AIOKafkaConsumer (not started) with the config's security, subscribed to `topics` if any."""
    return AIOKafkaConsumer(*topics, **_merged(kafka, extra))


def make_admin(kafka: KafkaConfig, **extra: Any) -> AIOKafkaAdminClient:
    """An AIOKafkaAdminClient (not started) with the config's security."""
    return AIOKafkaAdminClient(**_merged(kafka, extra))


@dataclass(slots=True, frozen=True)
class FaustBroker:
    """`faust.App(..., broker=urls, broker_credentials=credentials)`."""

    urls: list[str]
    credentials: CredentialsT | None


def faust_broker(kafka: KafkaConfig) -> FaustBroker:
    """Faust's aiokafka transport (`kafka://` URLs; TLS and SASL come from the credentials, not the URL).

    faust-streaming 0.15.3 maps SSLCredentials to SSL, SASLCredentials to SASL_PLAINTEXT, or to SASL_SSL
    when it holds an ssl_context (faust/transport/drivers/aiokafka.py credentials_to_aiokafka_auth).
    """
    from faust.auth import SASLCredentials, SSLCredentials

    security = kafka.security
    _check_sasl(security)
    urls = [f"kafka://{server.strip()}" for server in kafka.bootstrap_servers.split(",") if server.strip()]
    context = kafka_ssl_context(security)
    credentials: CredentialsT | None = None
    if security.sasl:
        assert security.password is not None and security.sasl_mechanism is not None
        credentials = SASLCredentials(
            username=security.username,
            password=security.password.reveal(),
            ssl_context=context,
            mechanism=security.sasl_mechanism,
        )
    elif context is not None:
        credentials = SSLCredentials(context)
    return FaustBroker(urls, credentials)


def explain_kafka_error(exc: BaseException, kafka: KafkaConfig, endpoint: str | None = None) -> str | None:
    """An actionable message for a Kafka client failure caused by `kafka.security`, or None.

    `endpoint` (host:port) is the broker involved when known. The message never holds a secret.
    """
    security = kafka.security
    where = endpoint or kafka.bootstrap_servers
    user = f"user {security.username!r}" if security.username else "the user"
    message: str | None = None
    if isinstance(exc, ClientSetupError):
        message = str(exc)
    elif isinstance(exc, SaslAuthenticationFailed):
        message = (
            f"Kafka at {where} refused the credentials of {user} ({security.sasl_mechanism}): wrong password "
            f"or unknown user; check {PREFIX}username and {PREFIX}password (its value comes from "
            f"{security.password.source if security.password else 'nowhere'}) and that the user exists for "
            f"{security.sasl_mechanism} on the broker"
        )
    elif isinstance(exc, UnsupportedSaslMechanismError):
        message = (
            f"Kafka at {where} does not offer {PREFIX}sasl_mechanism {security.sasl_mechanism}: {exc}; "
            f"set {PREFIX}sasl_mechanism to one the broker enables"
        )
    elif isinstance(exc, IllegalSaslStateError):
        message = (
            f"Kafka at {where} does not expect SASL on this listener, while {PREFIX}protocol is "
            f"{security.protocol}: set {PREFIX}protocol to {'SSL' if security.tls else 'PLAINTEXT'} "
            "or connect to the broker's SASL listener"
        )
    elif security.tls:
        message = explain_tls_failure(
            exc, prefix=PREFIX, endpoint=where, tls_key=f"{PREFIX}protocol", ca_file=security.ca_file
        )
        if message is None and isinstance(exc, ssl.SSLError):
            message = f"TLS with Kafka at {where} failed ({exc.reason or exc}); see {PREFIX}*"
        if message is None and not security.sasl and _closed_early(exc):
            # the TLS handshake passed, and the broker hung up on the first request: a SASL_SSL listener
            message = (
                f"Kafka at {where} closed the connection at the first request after the TLS handshake: "
                f"that listener requires SASL; set {PREFIX}protocol (now {security.protocol}) to SASL_SSL, "
                f"with {PREFIX}sasl_mechanism, {PREFIX}username and {PREFIX}password, as the broker's "
                "listener is configured"
            )
    elif _closed_early(exc):
        message = (
            f"Kafka at {where} closed the connection at the first request: if that listener speaks TLS "
            f"or requires SASL, set {PREFIX}protocol (now {security.protocol}) to SSL, SASL_SSL or "
            "SASL_PLAINTEXT as the broker's listener is configured"
        )
    if message is None:
        return None
    return scrub(message, (security.password, security.key_password))


def _closed_early(exc: BaseException) -> bool:
    """A broker that closes a plaintext client's first request: a TLS or SASL listener."""
    if isinstance(exc, KafkaConnectionError) and "closed" in str(exc):
        return True
    return isinstance(exc, ConnectionResetError | asyncio.IncompleteReadError)


async def diagnose_kafka(kafka: KafkaConfig) -> str | None:
    """Connect to each bootstrap server as the clients would (TLS, SASL, then a metadata request) and say
    what stops them, or None when a server answers (or nothing actionable was found)."""
    from aiokafka.conn import create_conn
    from aiokafka.protocol.metadata import MetadataRequest

    try:
        options = kafka_client_options(kafka)
    except ClientSetupError as exc:
        return str(exc)
    auth = {k: v for k, v in options.items() if k in SECURITY_ARGUMENTS}
    first: str | None = None
    for server in (s.strip() for s in kafka.bootstrap_servers.split(",")):
        if not server:
            continue
        host, _, port = server.rpartition(":")
        if not host or not port.isdigit():
            continue
        conn = None
        try:
            conn = await create_conn(
                host.strip("[]"), int(port), request_timeout_ms=kafka.request_timeout_ms, **auth
            )
            await conn.send(MetadataRequest([]))
            return None
        except (TimeoutError, OSError, KafkaError, asyncio.IncompleteReadError) as exc:
            cause = exc.__cause__ if isinstance(exc, KafkaConnectionError) and exc.__cause__ else exc
            first = (
                first or explain_kafka_error(cause, kafka, server) or explain_kafka_error(exc, kafka, server)
            )
        finally:
            if conn is not None:
                conn.close()
    return first


async def start_kafka_client(client: Any, kafka: KafkaConfig) -> None:
    """`await client.start()`; when it cannot reach the cluster, KafkaAccessError says why and which
    `kafka.security` key to change (from `diagnose_kafka`), else the original error propagates.

    A broker that is starting can answer metadata without a broker in it, and aiokafka then fails an
    assertion ("Did we not perform bootstrap?") looking for the transaction coordinator: that is Kafka not
    up yet, so it is raised as a KafkaConnectionError, which callers wait out like a refused connection."""
    try:
        try:
            await client.start()
        except AssertionError as exc:
            await _stop_quietly(client)
            raise KafkaConnectionError(
                f"Kafka at {kafka.bootstrap_servers} is not ready (it answered without a broker: {exc})"
            ) from exc
    except KafkaConnectionError as exc:
        reason = explain_kafka_error(exc, kafka) if not isinstance(exc, KafkaAccessError) else None
        reason = reason or await diagnose_kafka(kafka)
        if reason is None:
            raise
        await _stop_quietly(client)
        raise KafkaAccessError(reason) from exc


async def _stop_quietly(client: Any) -> None:
    """Stop (or close) a client whose start failed, whatever state it was left in."""
    stop = getattr(client, "stop", None) or getattr(client, "close", None)
    if stop is not None:
        with contextlib.suppress(KafkaError, OSError, AssertionError):
            await stop()


async def stop_client(client: Any, what: str, timeout_s: float = STOP_TIMEOUT_S) -> None:
    """Stop (or close) an aiokafka client within ``timeout_s``, whatever Kafka does meanwhile; never raises
    but a cancel.

    aiokafka's ``stop`` waits, without a deadline, for what the client still has under way: a
    transactional producer for its requests to the transaction coordinator (with Kafka away, until Kafka
    comes back), any producer for the records it holds. Past ``timeout_s`` the stop is cancelled, which
    cancels those requests, and the client's connections are closed. Nothing is lost that way: records
    not acknowledged were never confirmed to anyone, and a transaction left open is aborted by the broker
    on its timeout, or when its transactional id is registered again."""
    stop = getattr(client, "stop", None) or client.close
    try:
        await asyncio.wait_for(stop(), timeout_s)
        return
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is None or task.cancelling():
            raise  # this task is being cancelled: let it be
        # aiokafka's consumer awaits the fetch requests it has just cancelled: with Kafka away one of
        # them is in its retry backoff, and its CancelledError comes out of stop()
        log.info("%s stopped with its fetch requests cancelled", what)
    except TimeoutError:
        log.warning(
            "%s did not stop within %.0f s (requests to Kafka still under way): its connections are closed",
            what, timeout_s,
        )  # fmt: skip
    except (KafkaError, OSError, AssertionError) as exc:  # a client in a failed state still closes
        log.info("%s stopped with %r", what, exc)
    connections = getattr(client, "client", None) or getattr(client, "_client", None)
    if connections is not None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(connections.close(), timeout_s)
