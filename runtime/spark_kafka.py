"""Options of Spark's Kafka source and sink (`spark.read[Stream].format("kafka")`, `df.write.format("kafka")`)
from `kafka.security`, and the session setting that keeps their secrets out of plans.

The Java Kafka client takes SASL credentials only as a JAAS line, `kafka.sasl.jaas.config`, which
therefore holds the password, and a client key (mutual TLS) as PEM text in `kafka.ssl.keystore.key`
(the config names separate certificate and key files, and a PEM keystore *file* must hold both).
Where they can show:

- plan strings (`explain`, the SQL tab of the UI, event logs) print a data source's options through
  `SQLConf.redactOptions`, which masks an option when its key *or value* matches
  `spark.sql.redaction.options.regex` (default `(?i)url`) or `spark.redaction.regex` (default
  `(?i)secret|password|token|access[.]?key`). Checked on Spark 4.2.0: the JAAS line is masked by default
  (its value contains `password=`), `kafka.ssl.key.password` too (its key), but the PEM private key in
  `kafka.ssl.keystore.key` is NOT. `SPARK_REDACTION_CONF` widens the options regex to cover it (and the
  JAAS line by key, not by the chance of its content): give it to the SparkSession builder.
- the Kafka client's own config log masks these keys (they are PASSWORD-type configs), and Spark's Kafka
  connector redacts `sasl.jaas.config` when it logs consumer parameters.
"""

from __future__ import annotations

import base64
import binascii
from pathlib import Path

from runtime.config import KafkaConfig
from runtime.tls import ClientSetupError

PREFIX = "kafka.security."

#: SparkSession config: option keys whose values plans must mask (Spark's default `(?i)url` plus the
#: default secret pattern, the JAAS line and the inline PEM key)
SPARK_REDACTION_CONF: dict[str, str] = {
    "spark.sql.redaction.options.regex": "(?i)url|secret|password|token|access[.]?key|jaas|keystore[.]key",
}

_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
_PKCS8 = "-----BEGIN PRIVATE KEY-----"
_PKCS8_ENCRYPTED = "-----BEGIN ENCRYPTED PRIVATE KEY-----"
_PKCS8_ENCRYPTED_END = "-----END ENCRYPTED PRIVATE KEY-----"
#: DER of the object identifier of PBES2 (1.2.840.113549.1.5.13, RFC 8018), the scheme `openssl pkcs8
#: -topk8` uses unless told `-v1`: Java 17's EncryptedPrivateKeyInfo, which the Kafka client's PEM key
#: loader relies on, has no PBES2 key factory ("PBES2 SecretKeyFactory not available")
_PBES2_OID = bytes.fromhex("06092a864886f70d01050d")


def _der_header(data: bytes, at: int) -> tuple[int, int, int]:
    """(tag, start of the content, length of the content) of the DER element at ``at``."""
    tag, first = data[at], data[at + 1]
    if first < 0x80:
        return tag, at + 2, first
    size = first & 0x7F
    return tag, at + 2 + size, int.from_bytes(data[at + 2 : at + 2 + size], "big")


def _is_pbes2(pem: str) -> bool:
    """Whether an ``ENCRYPTED PRIVATE KEY`` PEM (PKCS#8 EncryptedPrivateKeyInfo) is encrypted with PBES2:
    its first element, the encryption AlgorithmIdentifier, starts with PBES2's identifier."""
    body = pem.split(_PKCS8_ENCRYPTED, 1)[1].split(_PKCS8_ENCRYPTED_END, 1)[0]
    try:
        der = base64.b64decode("".join(body.split()), validate=True)
        tag, at, _ = _der_header(der, 0)  # EncryptedPrivateKeyInfo ::= SEQUENCE {
        inner, at, _ = _der_header(der, at)  # encryptionAlgorithm AlgorithmIdentifier ::= SEQUENCE {
    except (binascii.Error, IndexError):
        return False  # not for this check to judge: the Java client says what it finds wrong
    return tag == inner == 0x30 and der[at : at + len(_PBES2_OID)] == _PBES2_OID


def pbes2_advice(key_file: Path) -> str:
    """What to do with a key the Java client cannot decrypt: the two openssl steps."""
    return (
        f"decrypt it (`openssl pkcs8 -in {key_file} -out <plain key>`, which asks for its password), then "
        "encrypt it the old way (`openssl pkcs8 -topk8 -v1 PBE-SHA1-3DES -in <plain key> -out <new key>`, "
        f"with the password of {PREFIX}key_password), point {PREFIX}key_file at the new key and delete the "
        "plain one; or leave the key unencrypted (`-nocrypt`) in a file only this user can read"
    )


def check_spark_client_key(kafka: KafkaConfig) -> None:
    """Refuse, before Spark starts, a client key the Java Kafka client of the Spark jobs cannot read: a
    PKCS#8 key encrypted with PBES2 (the Python clients of the agent and the worker read it)."""
    key_file = kafka.security.key_file
    if not kafka.security.tls or key_file is None:
        return
    pem = _read_pem(key_file, f"{PREFIX}key_file")
    if _PKCS8_ENCRYPTED in pem and _is_pbes2(pem):
        raise _pbes2_error(key_file)


def _pbes2_error(key_file: Path) -> ClientSetupError:
    return ClientSetupError(
        f"config key {PREFIX}key_file: {key_file} is encrypted with PBES2 (openssl's default), which the "
        f"Java Kafka client of the Spark jobs cannot decrypt; {pbes2_advice(key_file)}"
    )


def _jaas_quote(text: str) -> str:
    """A JAAS option value in double quotes (Kafka's JaasConfig reads backslash escapes in quotes)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def jaas_config(mechanism: str, username: str, password: str) -> str:
    """The `sasl.jaas.config` line of the Java client for PLAIN or SCRAM (holds the password)."""
    module = _LOGIN_MODULES[mechanism]
    return f"{module} required username={_jaas_quote(username)} password={_jaas_quote(password)};"


def _read_pem(path: Path, key: str) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        raise ClientSetupError(f"config key {key}: file {path} does not exist") from None
    except PermissionError:
        raise ClientSetupError(
            f"config key {key}: file {path} is not readable by this user (permission denied)"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ClientSetupError(f"config key {key}: cannot read {path} as PEM text ({exc})") from None


def spark_kafka_options(kafka: KafkaConfig) -> dict[str, str]:
    """`kafka.*` options for Spark's Kafka source and sink: servers, protocol, SASL and TLS.

    The dict holds secrets (JAAS line, key, key password): pass it to `.options(**...)` only, with
    SPARK_REDACTION_CONF in the session, and never print it.
    """
    security = kafka.security
    options = {
        "kafka.bootstrap.servers": kafka.bootstrap_servers,
        "kafka.security.protocol": security.protocol,
    }
    if security.sasl:
        if security.sasl_mechanism is None or security.username is None or security.password is None:
            raise ClientSetupError(
                f"config keys {PREFIX}sasl_mechanism, {PREFIX}username and {PREFIX}password are required "
                f"when {PREFIX}protocol is {security.protocol!r}"
            )
        options["kafka.sasl.mechanism"] = security.sasl_mechanism
        options["kafka.sasl.jaas.config"] = jaas_config(
            security.sasl_mechanism, security.username, security.password.reveal()
        )
    if security.tls:
        # the Java client checks hostnames ("https") unless told otherwise with an empty algorithm
        options["kafka.ssl.endpoint.identification.algorithm"] = "https" if security.check_hostname else ""
        if security.ca_file is not None:
            _read_pem(security.ca_file, f"{PREFIX}ca_file")  # readable here; executors need the same path
            options["kafka.ssl.truststore.type"] = "PEM"
            options["kafka.ssl.truststore.location"] = str(security.ca_file)
        if security.cert_file is not None and security.key_file is not None:
            chain = _read_pem(security.cert_file, f"{PREFIX}cert_file")
            key = _read_pem(security.key_file, f"{PREFIX}key_file")
            if "-----BEGIN CERTIFICATE-----" not in chain:
                raise ClientSetupError(
                    f"config key {PREFIX}cert_file: {security.cert_file} holds no PEM certificate"
                )
            encrypted = _PKCS8_ENCRYPTED in key
            if not encrypted and _PKCS8 not in key:
                raise ClientSetupError(
                    f"config key {PREFIX}key_file: {security.key_file} is not a PKCS#8 PEM key, the only kind "
                    "the Java Kafka client of the Spark jobs reads (-----BEGIN [ENCRYPTED] PRIVATE KEY-----); "
                    f"convert it with `openssl pkcs8 -topk8 -v1 PBE-SHA1-3DES -in {security.key_file} -out "
                    "<new file>` (-nocrypt instead of -v1 PBE-SHA1-3DES to leave it unencrypted)"
                )
            if encrypted and _is_pbes2(key):
                raise _pbes2_error(security.key_file)
            options["kafka.ssl.keystore.type"] = "PEM"
            options["kafka.ssl.keystore.certificate.chain"] = chain
            options["kafka.ssl.keystore.key"] = key
            if encrypted:
                if security.key_password is None:
                    raise ClientSetupError(
                        f"config key {PREFIX}key_file: {security.key_file} is encrypted; set {PREFIX}key_password"
                    )
                options["kafka.ssl.key.password"] = security.key_password.reveal()
    return options
