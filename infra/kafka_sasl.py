"""Secure mode of the local Kafka broker: its client listener speaks SASL_SSL only.

- Clients authenticate with SCRAM-SHA-512, SCRAM-SHA-256 or PLAIN as user `cdc` over TLS (broker
  certificate signed by the local CA; a client certificate is asked for but not required).
- SCRAM credentials are written into the cluster metadata when the storage is formatted (KIP-900,
  `kafka-storage format --add-scram`), so they exist before the broker first starts.
- PLAIN users are listed in the listener's JAAS config; the broker itself talks to its own listener
  (transaction markers) as the PLAIN user `broker`, which needs no metadata to be loaded first.
- The controller listener stays PLAINTEXT on loopback: it serves only the KRaft quorum, never data.

The secrets go into server.properties (0600) and, for the one format call, into a 0600 java argument
file (`java @file`), never onto a command line.
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import Iterator, Sequence
from pathlib import Path

from infra.errors import SecurityMaterialError
from infra.secret_files import private_folder, read_secret, write_private
from infra.secure import KAFKA_BROKER_USER, KAFKA_SASL_MECHANISMS, KAFKA_USER, SecureLayout, SecureMaterial

LISTENER = "SASL_SSL"
#: the mechanism readiness probes use: the strongest one, and the one that proves SCRAM users exist
PROBE_MECHANISM = "SCRAM-SHA-512"
SCRAM_MECHANISMS = tuple(m for m in KAFKA_SASL_MECHANISMS if m.startswith("SCRAM-"))
#: written beside the data at format time: says which SCRAM users the metadata holds (names only)
SCRAM_MARKER = "scram-users"


def listener_properties(host: str, port: int, controller_port: int, layout: SecureLayout) -> dict[str, str]:
    """server.properties entries that replace the PLAINTEXT client listener with SASL_SSL."""
    user_password = read_secret(layout.kafka_password)
    broker_password = read_secret(layout.kafka_broker_password)
    keystore_password = read_secret(layout.keystore_password)
    listener = LISTENER.lower()
    plain_jaas = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="{KAFKA_BROKER_USER}" password="{broker_password}" '
        f'user_{KAFKA_BROKER_USER}="{broker_password}" user_{KAFKA_USER}="{user_password}";'
    )
    props = {
        "listeners": f"{LISTENER}://{host}:{port},CONTROLLER://{host}:{controller_port}",
        "advertised.listeners": f"{LISTENER}://{host}:{port}",
        "inter.broker.listener.name": LISTENER,
        "listener.security.protocol.map": f"CONTROLLER:PLAINTEXT,{LISTENER}:{LISTENER}",
        "sasl.enabled.mechanisms": ",".join(KAFKA_SASL_MECHANISMS),
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        f"listener.name.{listener}.plain.sasl.jaas.config": plain_jaas,
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(layout.kafka_keystore),
        "ssl.keystore.password": keystore_password,
        "ssl.key.password": keystore_password,
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(layout.ca.cert),
        "ssl.client.auth": "requested",
        "ssl.endpoint.identification.algorithm": "https",
    }
    for mechanism in SCRAM_MECHANISMS:
        props[f"listener.name.{listener}.{mechanism.lower()}.sasl.jaas.config"] = (
            "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        )
    return props


def scram_format_arguments(layout: SecureLayout) -> list[str]:
    """`--add-scram` arguments of `kafka-storage format` creating user `cdc` for every SCRAM mechanism."""
    password = read_secret(layout.kafka_password)
    args: list[str] = []
    for mechanism in SCRAM_MECHANISMS:
        args += ["--add-scram", f"{mechanism}=[name={KAFKA_USER},password={password}]"]
    return args


def scram_marker_text() -> str:
    return "".join(f"{mechanism} {KAFKA_USER}\n" for mechanism in SCRAM_MECHANISMS)


def require_scram_storage(root: Path, data: Path) -> None:
    """Secure mode needs SCRAM users, which only a format adds: refuse data formatted in plaintext mode."""
    if (data / "meta.properties").is_file() and not (root / SCRAM_MARKER).is_file():
        raise SecurityMaterialError(
            f"Kafka data in {data} was formatted in plaintext mode, without SCRAM users; secure mode needs "
            f"fresh storage: remove {root} (its topics are lost) or set another CDC_HOME"
        )


@contextlib.contextmanager
def java_argument_file(layout: SecureLayout, argv: Sequence[str]) -> Iterator[Path]:
    """A 0600 `java @file` holding `argv`, removed on exit: JVM arguments kept out of /proc/*/cmdline."""
    folder = private_folder(layout.secrets)
    quoted = ('"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"' for arg in argv)
    path = write_private(folder / ".java-args", "\n".join(quoted) + "\n")
    try:
        yield path
    finally:
        path.unlink(missing_ok=True)


def redact(text: str, layout: SecureLayout) -> str:
    """`text` (a tool's output) with every secret of the layout masked, before it reaches an error."""
    for path in (layout.kafka_password, layout.kafka_broker_password, layout.keystore_password):
        with contextlib.suppress(Exception):
            text = text.replace(read_secret(path), "***")
    return text


def client_options(material: SecureMaterial, mechanism: str = PROBE_MECHANISM) -> dict[str, object]:
    """aiokafka keyword arguments for user `cdc` over SASL_SSL."""
    context: ssl.SSLContext = material.ssl_context()
    return {
        "security_protocol": LISTENER,
        "sasl_mechanism": mechanism,
        "sasl_plain_username": material.kafka_user,
        "sasl_plain_password": material.kafka_password(),
        "ssl_context": context,
    }
