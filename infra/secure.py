"""Secure mode's files: where they live, making them once, and what a client needs to connect.

Layout under CDC_HOME (folders 0700):
    tls/ca.pem, tls/ca.key                the local CA (key 0600)
    tls/kafka.p12                         broker keystore (PKCS12), certificate for 127.0.0.1-3 and localhost
    tls/cassandra-<address>.p12           one keystore per Cassandra node address
    tls/client.pem, tls/client.key        client certificate for mutual TLS; key encrypted with key.password
    secure/kafka.password                 SCRAM-SHA-512/256 and PLAIN password of Kafka user `cdc`
    secure/kafka-broker.password          the broker's own inter-broker PLAIN password
    secure/cassandra.password             password of Cassandra role `cdc`
    secure/key.password                   password of tls/client.key
    secure/keystore.password              password of the server keystores

Nothing here holds a secret in a field: SecureMaterial names files, and reads them only when asked.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

from infra.secret_files import ensure_password, private_folder, read_secret
from infra.settings import InfraSettings
from infra.tls import (
    CertificateAuthority,
    ensure_ca,
    ensure_client_certificate,
    ensure_server_keystore,
)

KAFKA_USER = "cdc"
#: the broker's principal on its own SASL_SSL listener (transaction markers, replica fetches)
KAFKA_BROKER_USER = "broker"
CASSANDRA_USER = "cdc"
#: what the broker's SASL_SSL listener accepts, strongest first
KAFKA_SASL_MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN")
#: names in the broker certificate: every loopback address a node may use, and localhost
KAFKA_CERT_NAMES = ("127.0.0.1", "127.0.0.2", "127.0.0.3", "localhost")


@dataclass(slots=True, frozen=True)
class SecureLayout:
    """Paths of secure mode's files under one CDC_HOME (only paths: printing one shows no secret)."""

    tls: Path
    secrets: Path

    @classmethod
    def of(cls, settings: InfraSettings) -> SecureLayout:
        return cls(tls=settings.tls, secrets=settings.secrets)

    @property
    def ca(self) -> CertificateAuthority:
        return CertificateAuthority(cert=self.tls / "ca.pem", key=self.tls / "ca.key")

    @property
    def client_cert(self) -> Path:
        return self.tls / "client.pem"

    @property
    def client_key(self) -> Path:
        return self.tls / "client.key"

    @property
    def kafka_keystore(self) -> Path:
        return self.tls / "kafka.p12"

    def cassandra_keystore(self, address: str) -> Path:
        return self.tls / f"cassandra-{address}.p12"

    @property
    def kafka_password(self) -> Path:
        return self.secrets / "kafka.password"

    @property
    def kafka_broker_password(self) -> Path:
        return self.secrets / "kafka-broker.password"

    @property
    def cassandra_password(self) -> Path:
        return self.secrets / "cassandra.password"

    @property
    def key_password(self) -> Path:
        return self.secrets / "key.password"

    @property
    def keystore_password(self) -> Path:
        return self.secrets / "keystore.password"


@dataclass(slots=True, frozen=True)
class SecureMaterial:
    """What a client of the secured local services needs: trust anchor, credentials and endpoints."""

    ca_file: Path
    client_cert: Path
    client_key: Path
    key_password_file: Path
    kafka_bootstrap: str
    kafka_user: str
    kafka_password_file: Path
    cassandra_host: str
    cql_port: int
    cassandra_user: str
    cassandra_password_file: Path
    kafka_security_protocol: str = "SASL_SSL"
    kafka_sasl_mechanisms: tuple[str, ...] = KAFKA_SASL_MECHANISMS

    def kafka_password(self) -> str:
        return read_secret(self.kafka_password_file)

    def cassandra_password(self) -> str:
        return read_secret(self.cassandra_password_file)

    def key_password(self) -> str:
        return read_secret(self.key_password_file)

    def ssl_context(self, *, client_certificate: bool = False) -> ssl.SSLContext:
        """A client TLS context that trusts the local CA and checks host names (IP SANs included)."""
        context = ssl.create_default_context(cafile=str(self.ca_file))
        if client_certificate:
            context.load_cert_chain(str(self.client_cert), str(self.client_key), password=self.key_password())
        return context


def ensure_shared_material(settings: InfraSettings) -> SecureMaterial:
    """Passwords, the CA and the client certificate: made on first use, reused afterwards."""
    layout = SecureLayout.of(settings)
    private_folder(layout.tls)
    private_folder(layout.secrets)
    for password in (
        layout.kafka_password,
        layout.kafka_broker_password,
        layout.cassandra_password,
        layout.key_password,
        layout.keystore_password,
    ):
        ensure_password(password)
    ca = ensure_ca(layout.tls)
    ensure_client_certificate(
        ca,
        layout.client_cert,
        layout.client_key,
        common_name=KAFKA_USER,
        key_password_file=layout.key_password,
    )
    return material(settings)


def material(settings: InfraSettings) -> SecureMaterial:
    """The client's view of secure mode's files (paths only; they exist once `ensure_shared_material` ran)."""
    layout = SecureLayout.of(settings)
    return SecureMaterial(
        ca_file=layout.ca.cert,
        client_cert=layout.client_cert,
        client_key=layout.client_key,
        key_password_file=layout.key_password,
        kafka_bootstrap=f"127.0.0.1:{settings.kafka_port}",
        kafka_user=KAFKA_USER,
        kafka_password_file=layout.kafka_password,
        cassandra_host="127.0.0.1",
        cql_port=settings.cql_port,
        cassandra_user=CASSANDRA_USER,
        cassandra_password_file=layout.cassandra_password,
    )


def ensure_kafka_keystore(settings: InfraSettings) -> Path:
    layout = SecureLayout.of(settings)
    ensure_shared_material(settings)
    return ensure_server_keystore(
        layout.ca,
        layout.kafka_keystore,
        common_name="kafka",
        names=KAFKA_CERT_NAMES,
        password_file=layout.keystore_password,
    )


def ensure_cassandra_keystore(settings: InfraSettings, address: str) -> Path:
    layout = SecureLayout.of(settings)
    ensure_shared_material(settings)
    names = (address, "localhost") if address == "127.0.0.1" else (address,)
    return ensure_server_keystore(
        layout.ca,
        layout.cassandra_keystore(address),
        common_name=f"cassandra-{address}",
        names=names,
        password_file=layout.keystore_password,
    )
