"""A local certificate authority and the certificates it signs, made with the `openssl` command.

Passwords reach openssl as `file:` arguments, never as text on its command line. Private keys are
generated in a 0700 scratch folder that is removed afterwards; a server key leaves it only inside a
password-protected PKCS12 keystore, the client key only encrypted. Each file is made once and reused,
except a leaf certificate close to expiry, which is made again.
"""

from __future__ import annotations

import ipaddress
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from infra.errors import SecurityMaterialError
from infra.secret_files import require_private

CA_DAYS = 3650
LEAF_DAYS = 825
#: a leaf certificate expiring within this many seconds is made again
RENEW_BEFORE_S = 7 * 24 * 3600
_KEY = "rsa:2048"


@dataclass(slots=True, frozen=True)
class CertificateAuthority:
    cert: Path
    """PEM certificate: the trust anchor every client and server is given."""
    key: Path
    """PEM private key, unencrypted but 0600: kept so later nodes can get certificates."""


def _openssl(*args: str, what: str) -> None:
    if shutil.which("openssl") is None:
        raise SecurityMaterialError(
            f"openssl not found on PATH (needed to make {what}); install it with `apt-get install openssl`"
        )
    done = subprocess.run(["openssl", *args], capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-10:])
        raise SecurityMaterialError(
            f"`openssl {args[0]}` failed (exit {done.returncode}) making {what}:\n{tail}"
        )


@contextmanager
def _scratch(folder: Path) -> Iterator[Path]:
    """A private (0700) working folder beside the outputs, so a rename into place is atomic."""
    work = Path(tempfile.mkdtemp(prefix=".work-", dir=folder))
    try:
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _subject_alt_names(names: Sequence[str]) -> str:
    entries = []
    for name in names:
        try:
            ipaddress.ip_address(name)
        except ValueError:
            entries.append(f"DNS:{name}")
        else:
            entries.append(f"IP:{name}")
    return ",".join(entries)


def ensure_ca(folder: Path, common_name: str = "cassandra-cdc local CA") -> CertificateAuthority:
    ca = CertificateAuthority(cert=folder / "ca.pem", key=folder / "ca.key")
    if ca.cert.is_file() and ca.key.is_file():
        require_private(ca.key)
        return ca
    with _scratch(folder) as work:
        _openssl(
            "req", "-x509", "-new", "-newkey", _KEY, "-nodes", "-sha256", "-days", str(CA_DAYS),
            "-subj", f"/CN={common_name}",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign",
            "-keyout", str(work / "ca.key"), "-out", str(work / "ca.pem"),
            what=f"the local CA in {folder}",
        )  # fmt: skip
        (work / "ca.key").chmod(0o600)
        (work / "ca.pem").chmod(0o644)
        (work / "ca.key").replace(ca.key)
        (work / "ca.pem").replace(ca.cert)
    return ca


def _sign_leaf(
    ca: CertificateAuthority, work: Path, *, common_name: str, names: Sequence[str], usage: str, what: str
) -> tuple[Path, Path]:
    """A new key and a certificate for it signed by `ca`; both in `work`."""
    key, csr, cert, ext = work / "leaf.key", work / "leaf.csr", work / "leaf.pem", work / "ext.cnf"
    lines = [
        "[v3]",
        "basicConstraints=critical,CA:FALSE",
        "keyUsage=critical,digitalSignature,keyEncipherment",
        f"extendedKeyUsage={usage}",
        "subjectKeyIdentifier=hash",
        "authorityKeyIdentifier=keyid",
    ]
    if names:
        lines.append(f"subjectAltName={_subject_alt_names(names)}")
    ext.write_text("\n".join(lines) + "\n")
    _openssl(
        "req", "-new", "-newkey", _KEY, "-nodes", "-subj", f"/CN={common_name}",
        "-keyout", str(key), "-out", str(csr), what=what,
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(ca.cert), "-CAkey", str(ca.key),
        "-set_serial", f"0x{secrets.token_hex(16)}", "-days", str(LEAF_DAYS), "-sha256",
        "-extfile", str(ext), "-extensions", "v3", "-out", str(cert), what=what,
    )  # fmt: skip
    return key, cert


def _still_valid(cert: Path) -> bool:
    done = subprocess.run(
        ["openssl", "x509", "-checkend", str(RENEW_BEFORE_S), "-noout", "-in", str(cert)],
        capture_output=True,
        timeout=60,
        check=False,
    )
    return done.returncode == 0


def ensure_server_keystore(
    ca: CertificateAuthority, keystore: Path, *, common_name: str, names: Sequence[str], password_file: Path
) -> Path:
    """A PKCS12 keystore (key, certificate for `names`, CA chain) protected by the password in `password_file`.

    The certificate is also kept as PEM beside it (`<keystore>.pem`, public) to check its expiry.
    """
    cert_copy = keystore.with_suffix(".pem")
    if keystore.is_file() and cert_copy.is_file() and _still_valid(cert_copy):
        require_private(keystore)
        return keystore
    what = f"the keystore {keystore}"
    with _scratch(keystore.parent) as work:
        key, cert = _sign_leaf(
            ca, work, common_name=common_name, names=names, usage="serverAuth,clientAuth", what=what
        )
        _openssl(
            "pkcs12", "-export", "-in", str(cert), "-inkey", str(key), "-certfile", str(ca.cert),
            "-name", common_name, "-passout", f"file:{password_file}", "-out", str(work / "store.p12"),
            what=what,
        )  # fmt: skip
        (work / "store.p12").chmod(0o600)
        cert.chmod(0o644)
        (work / "store.p12").replace(keystore)
        cert.replace(cert_copy)
    return keystore


def ensure_client_certificate(
    ca: CertificateAuthority, cert: Path, key: Path, *, common_name: str, key_password_file: Path
) -> tuple[Path, Path]:
    """A client certificate (PEM) and its key (PKCS8 PEM, AES-256 encrypted with the key password)."""
    if cert.is_file() and key.is_file() and _still_valid(cert):
        require_private(key)
        return cert, key
    what = f"the client certificate {cert}"
    with _scratch(cert.parent) as work:
        plain_key, signed = _sign_leaf(
            ca, work, common_name=common_name, names=(), usage="clientAuth", what=what
        )
        _openssl(
            "pkcs8", "-topk8", "-v2", "aes-256-cbc", "-in", str(plain_key),
            "-passout", f"file:{key_password_file}", "-out", str(work / "client.key"), what=what,
        )  # fmt: skip
        (work / "client.key").chmod(0o600)
        signed.chmod(0o644)
        (work / "client.key").replace(key)
        signed.replace(cert)
    return cert, key
