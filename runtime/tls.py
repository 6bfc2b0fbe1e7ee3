"""Client TLS contexts built from config keys, and TLS failures told in terms of those keys.

Kafka (`kafka.security.*`) and Cassandra (`cassandra.tls.*`) clients share the same settings: a CA file,
an optional client certificate and key (mutual TLS), the key's password and hostname checking. Every
error names the key to fix and the file involved, never a password.
"""

from __future__ import annotations

import re
import ssl
from pathlib import Path

from runtime.config import ConfigError
from runtime.secrets import Secret

#: OpenSSL verify codes (X509_V_ERR_*) that SSLCertVerificationError.verify_code carries
CERT_NOT_YET_VALID = 9
CERT_HAS_EXPIRED = 10
_UNTRUSTED = {
    2: "its issuer certificate is unknown",
    18: "it is self-signed",
    19: "its chain ends in a self-signed certificate that is not trusted",
    20: "it is not signed by a CA this client trusts",
    21: "it cannot be verified against a trusted CA",
}
HOSTNAME_MISMATCH = 62
IP_ADDRESS_MISMATCH = 64

#: TLS alerts a server sends when it refuses the client's certificate (mutual TLS)
_CLIENT_CERT_ALERTS = {
    "SSLV3_ALERT_CERTIFICATE_EXPIRED": "the client certificate has expired",
    "SSLV3_ALERT_BAD_CERTIFICATE": "the server refused the client certificate",
    "SSLV3_ALERT_CERTIFICATE_UNKNOWN": "the server refused the client certificate",
    "TLSV1_ALERT_UNKNOWN_CA": "the server does not trust the CA that signed the client certificate",
    "TLSV13_ALERT_CERTIFICATE_REQUIRED": "the server requires a client certificate",
    "SSLV3_ALERT_HANDSHAKE_FAILURE": "the server ended the TLS handshake (no common protocol or cipher, or "
    "it requires a client certificate)",
}


class ClientSetupError(ConfigError):
    """A client cannot be made from the config (unreadable key, wrong key password...); names the key."""


class KeyPasswordRefused(ClientSetupError):
    """The client key's password is wrong or missing: a credential the server never gets to see, so the
    processes report it as they report a refused login (``Kafka refuses the agent: ...``)."""


class _KeyIsEncrypted(Exception):
    pass


def client_ssl_context(
    *,
    prefix: str,
    ca_file: Path | None,
    cert_file: Path | None,
    key_file: Path | None,
    key_password: Secret | None,
    check_hostname: bool,
) -> ssl.SSLContext:
    """A TLS client context (TLS 1.2+, server certificate required) from the keys under `prefix`
    (`kafka.security.`, `cassandra.tls.`); ClientSetupError names the key when a file does not load."""
    try:
        context = ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
    except (OSError, ValueError) as exc:
        raise ClientSetupError(
            _file_problem(exc, f"{prefix}ca_file", ca_file, "PEM CA certificate")
        ) from None
    context.check_hostname = check_hostname
    if cert_file is None and key_file is None:
        return context
    if cert_file is None or key_file is None:
        missing = "cert_file" if cert_file is None else "key_file"
        raise ClientSetupError(
            f"config key {prefix}{missing} is required for a client certificate (mutual TLS)"
        )
    asked = False

    def password() -> str:
        nonlocal asked
        asked = True
        if key_password is None:
            raise _KeyIsEncrypted
        return key_password.reveal()

    try:
        # always a callback: without one OpenSSL would prompt on the terminal for an encrypted key
        context.load_cert_chain(str(cert_file), str(key_file), password=password)
    except _KeyIsEncrypted:
        raise KeyPasswordRefused(
            f"config key {prefix}key_file: {key_file} is encrypted; set {prefix}key_password "
            "(inline, ${ENV_VAR} or file:/path)"
        ) from None
    except ssl.SSLError as exc:
        if exc.reason == "KEY_VALUES_MISMATCH":
            raise ClientSetupError(
                f"config key {prefix}key_file: {key_file} is not the private key of {prefix}cert_file {cert_file}"
            ) from None
        if asked:
            source = key_password.source if key_password is not None else "nowhere"
            raise KeyPasswordRefused(
                f"config key {prefix}key_password (its value comes from {source}) does not decrypt "
                f"{prefix}key_file {key_file}: wrong password, or the key of another password"
            ) from None
        if not _holds(cert_file, b"-----BEGIN CERTIFICATE-----"):
            raise ClientSetupError(
                f"config key {prefix}cert_file: {cert_file} holds no PEM certificate (-----BEGIN CERTIFICATE-----)"
            ) from None
        raise ClientSetupError(
            f"config key {prefix}key_file: {key_file} holds no PEM private key OpenSSL can read ({getattr(exc, 'reason', None) or exc})"
        ) from None
    except OSError as exc:
        for name, path in (("cert_file", cert_file), ("key_file", key_file)):
            try:
                path.open("rb").close()
            except OSError as file_exc:
                raise ClientSetupError(_file_problem(file_exc, prefix + name, path, "PEM file")) from None
        raise ClientSetupError(
            f"config keys {prefix}cert_file, {prefix}key_file: cannot load {cert_file}, {key_file}: {exc.strerror}"
        ) from None
    return context


def _holds(path: Path, marker: bytes) -> bool:
    try:
        return marker in path.read_bytes()
    except OSError:
        return False


def _file_problem(exc: BaseException, key: str, path: Path | None, what: str) -> str:
    if isinstance(exc, FileNotFoundError):
        return f"config key {key}: file {path} does not exist"
    if isinstance(exc, PermissionError):
        return f"config key {key}: file {path} is not readable by this user (permission denied)"
    if isinstance(exc, IsADirectoryError):
        return f"config key {key}: {path} is a directory, not a file"
    if isinstance(exc, ssl.SSLError):
        return f"config key {key}: {path} holds no {what} OpenSSL can read ({getattr(exc, 'reason', None) or exc})"
    if isinstance(exc, OSError):
        return f"config key {key}: cannot read {path}: {exc.strerror or exc}"
    return f"config key {key}: cannot load {path}: {exc}"


_SSL_TEXT = re.compile(r"\[SSL: (?P<reason>[A-Z0-9_]+)\] (?P<text>[^(]*?)\s*(\(_ssl\.c:\d+\))?$")
#: OpenSSL's verify messages, for errors that reach us as text only
_VERIFY_CODES = {
    "certificate has expired": CERT_HAS_EXPIRED,
    "certificate is not yet valid": CERT_NOT_YET_VALID,
    "unable to get issuer certificate": 2,
    "self-signed certificate in certificate chain": 19,
    "self signed certificate in certificate chain": 19,
    "self-signed certificate": 18,
    "self signed certificate": 18,
    "unable to get local issuer certificate": 20,
    "unable to verify the first certificate": 21,
    "Hostname mismatch": HOSTNAME_MISMATCH,
    "IP address mismatch": IP_ADDRESS_MISMATCH,
}


def as_ssl_error(exc: BaseException) -> BaseException:
    """The SSL error inside `exc` when a library kept only its text (cassandra-driver raises
    `OSError(errno, "Tried connecting to [...]. Last error: [SSL: ...] ...")`), else `exc` itself."""
    if isinstance(exc, ssl.SSLError) or not isinstance(exc, OSError):
        return exc
    match = _SSL_TEXT.search(str(exc.strerror or exc))
    if match is None:
        return exc
    reason, text = match["reason"], match["text"]
    if reason == "CERTIFICATE_VERIFY_FAILED":
        detail = text.split("certificate verify failed: ", 1)[-1]
        error = ssl.SSLCertVerificationError(1, f"[SSL: {reason}] {text}")
        error.reason = reason
        error.verify_message = detail
        error.verify_code = next((code for msg, code in _VERIFY_CODES.items() if detail.startswith(msg)), 0)
        return error
    error = ssl.SSLError(1, f"[SSL: {reason}] {text}")
    error.reason = reason
    return error


def explain_tls_failure(
    exc: BaseException, *, prefix: str, endpoint: str, tls_key: str, ca_file: Path | None
) -> str | None:
    """What a failed TLS handshake with `endpoint` means for the keys under `prefix`, or None when `exc` is
    not a TLS failure. `tls_key` is the key that turned TLS on (kafka.security.protocol, cassandra.tls.enabled).
    """
    trust = f"{prefix}ca_file ({ca_file})" if ca_file else f"{prefix}ca_file (unset: the system's CAs)"
    exc = as_ssl_error(exc)
    if isinstance(exc, ssl.SSLCertVerificationError):
        code, detail = exc.verify_code, exc.verify_message
        if code == CERT_HAS_EXPIRED:
            return (
                f"the TLS certificate of {endpoint} has expired ({detail}); the server needs a renewed "
                f"certificate (a client setting cannot fix this)"
            )
        if code == CERT_NOT_YET_VALID:
            return (
                f"the TLS certificate of {endpoint} is not valid yet ({detail}); check both machines' clocks"
            )
        if code in (HOSTNAME_MISMATCH, IP_ADDRESS_MISMATCH):
            return (
                f"the TLS certificate of {endpoint} does not name the address it was reached at ({detail}); "
                f"connect by a name the certificate lists, or set {prefix}check_hostname: false (tests only)"
            )
        if code in _UNTRUSTED:
            return (
                f"the TLS certificate of {endpoint} is not trusted: {_UNTRUSTED[code]} ({detail}); set "
                f"{trust} to the CA that signed the server's certificate"
            )
        return f"the TLS certificate of {endpoint} was refused ({detail}); see {trust}"
    if isinstance(exc, ssl.SSLError) and exc.reason in _CLIENT_CERT_ALERTS:
        return (
            f"TLS handshake with {endpoint} failed: {_CLIENT_CERT_ALERTS[exc.reason]} ({exc.reason}); see "
            f"{prefix}cert_file and {prefix}key_file"
        )
    if isinstance(exc, ssl.SSLError) and exc.reason in (
        "WRONG_VERSION_NUMBER",
        "UNEXPECTED_EOF_WHILE_READING",
    ):
        return _plaintext_port(endpoint, tls_key, exc.reason)
    if isinstance(exc, ssl.SSLEOFError | ConnectionResetError | ConnectionAbortedError):
        return _plaintext_port(endpoint, tls_key, type(exc).__name__)
    return None


def _plaintext_port(endpoint: str, tls_key: str, what: str) -> str:
    return (
        f"{endpoint} did not answer the TLS handshake ({what}): it is probably a plaintext port, while "
        f"{tls_key} asks for TLS; use the server's TLS port, or turn TLS off in {tls_key} if the server has none"
    )
