"""Throw-away TLS material for unit tests, made with the `openssl` command: a CA, a server certificate for
127.0.0.1, an expired one, a certificate from another CA, and client certificates with their keys (PKCS#8,
PKCS#8 encrypted, and the traditional PKCS#1 form the Java Kafka client cannot read)."""

from __future__ import annotations

import contextlib
import shutil
import socket
import ssl
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

KEY_PASSWORD = "k3y-pass"


@dataclass(slots=True, frozen=True)
class TlsMaterial:
    folder: Path
    ca: Path
    server_cert: Path
    server_key: Path
    expired_cert: Path
    """Server certificate for 127.0.0.1 signed by `ca` whose validity ended yesterday."""
    expired_key: Path
    misnamed_cert: Path
    """Server certificate signed by `ca` for elsewhere.example only."""
    misnamed_key: Path
    stranger_cert: Path
    """Server certificate for 127.0.0.1 signed by another CA (untrusted)."""
    stranger_key: Path
    client_cert: Path
    client_key: Path
    """PKCS#8, not encrypted."""
    client_key_encrypted: Path
    """PKCS#8, encrypted with KEY_PASSWORD by PBES2 (AES-256), which the Spark jobs' Java client cannot read."""
    client_key_3des: Path
    """PKCS#8, encrypted with KEY_PASSWORD the old way (PBE-SHA1-3DES), which every client reads."""
    client_key_pkcs1: Path
    """Traditional `BEGIN RSA PRIVATE KEY` form."""
    other_key: Path
    """A key that does not belong to client_cert."""


def _openssl(*args: str) -> None:
    done = subprocess.run(["openssl", *args], capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed: {done.stderr.strip()}")


def _ca(folder: Path, name: str) -> tuple[Path, Path]:
    cert, key = folder / f"{name}.pem", folder / f"{name}.key"
    _openssl(
        "req", "-x509", "-new", "-newkey", "rsa:2048", "-nodes", "-sha256", "-days", "30",
        "-subj", f"/CN={name}", "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign", "-keyout", str(key), "-out", str(cert),
    )  # fmt: skip
    return cert, key


def _leaf(
    folder: Path, name: str, ca: tuple[Path, Path], *, usage: str, days: str = "30",
    names: str = "IP:127.0.0.1,DNS:localhost",
) -> tuple[Path, Path]:  # fmt: skip
    key, csr, cert, ext = (folder / f"{name}{suffix}" for suffix in (".key", ".csr", ".pem", ".cnf"))
    ext.write_text(
        "[v3]\nbasicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
        f"extendedKeyUsage={usage}\nsubjectAltName={names}\n"
    )
    _openssl("req", "-new", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}", "-keyout", str(key),
             "-out", str(csr))  # fmt: skip
    _openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(ca[0]), "-CAkey", str(ca[1]), "-set_serial", "0x1234",
        "-days", days, "-sha256", "-extfile", str(ext), "-extensions", "v3", "-out", str(cert),
    )  # fmt: skip
    return cert, key


def make_tls_material(folder: Path) -> TlsMaterial:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    folder.mkdir(parents=True, exist_ok=True)
    ca = _ca(folder, "ca")
    stranger_ca = _ca(folder, "stranger-ca")
    server_cert, server_key = _leaf(folder, "server", ca, usage="serverAuth")
    expired_cert, expired_key = _leaf(folder, "expired", ca, usage="serverAuth", days="-1")
    misnamed_cert, misnamed_key = _leaf(
        folder, "misnamed", ca, usage="serverAuth", names="DNS:elsewhere.example"
    )
    stranger_cert, stranger_key = _leaf(folder, "stranger", stranger_ca, usage="serverAuth")
    client_cert, client_key = _leaf(folder, "client", ca, usage="clientAuth")
    encrypted, pkcs1, other = folder / "client-enc.key", folder / "client-rsa.key", folder / "other.key"
    password_file = folder / "key.password"
    password_file.write_text(KEY_PASSWORD + "\n")
    _openssl("pkcs8", "-topk8", "-v2", "aes-256-cbc", "-in", str(client_key),
             "-passout", f"file:{password_file}", "-out", str(encrypted))  # fmt: skip
    triple_des = folder / "client-3des.key"
    _openssl("pkcs8", "-topk8", "-v1", "PBE-SHA1-3DES", "-in", str(client_key),
             "-passout", f"file:{password_file}", "-out", str(triple_des))  # fmt: skip
    _openssl("rsa", "-in", str(client_key), "-traditional", "-out", str(pkcs1))
    _openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", str(other))
    return TlsMaterial(
        folder=folder,
        ca=ca[0],
        server_cert=server_cert,
        server_key=server_key,
        expired_cert=expired_cert,
        expired_key=expired_key,
        misnamed_cert=misnamed_cert,
        misnamed_key=misnamed_key,
        stranger_cert=stranger_cert,
        stranger_key=stranger_key,
        client_cert=client_cert,
        client_key=client_key,
        client_key_encrypted=encrypted,
        client_key_3des=triple_des,
        client_key_pkcs1=pkcs1,
        other_key=other,
    )


@contextlib.contextmanager
def loopback_server(handle: Callable[[socket.socket], None]) -> Iterator[int]:
    """A TCP server on 127.0.0.1 running `handle` on each connection in a thread; yields its port.

    Real handshakes against it show how a client fails on a listener that is not what it expects."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with contextlib.suppress(OSError), conn:
                conn.settimeout(5)
                handle(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield int(listener.getsockname()[1])
    finally:
        stop.set()
        thread.join(5)
        listener.close()


def tls_handler(cert: Path, key: Path) -> Callable[[socket.socket], None]:
    """A connection handler that completes a TLS handshake with `cert`, reads a little and closes, as a
    listener that did not like the request."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(cert), str(key))

    def handle(conn: socket.socket) -> None:
        with context.wrap_socket(conn, server_side=True) as secured:
            secured.recv(64)

    return handle
