"""Secure mode of the local Cassandra nodes: passwords (PasswordAuthenticator) and TLS-only CQL.

- cassandra.yaml turns on `PasswordAuthenticator` and `client_encryption_options` with
  `optional: false`, so the CQL port refuses plaintext. Cassandra 5.0 has only a yes/no
  `require_client_auth` (an "optional" value came after 5.0), so it stays false: clients may connect
  without a certificate, and one they present is not checked.
- Cassandra creates the well-known superuser cassandra/cassandra on first start. Once a node answers,
  that login creates the superuser role `cdc` with the generated password and then takes away the
  default role's login and superuser status, so no known password opens the cluster.
- `authorizer` stays AllowAllAuthorizer: the local services test authentication, not permissions.
"""

from __future__ import annotations

import time

from cassandra.cluster import NoHostAvailable

from infra.cql import Login, connect, is_authentication_failure, query_release_version, quiet_probe
from infra.errors import SecurityMaterialError
from infra.secret_files import read_secret
from infra.secure import SecureLayout, SecureMaterial

DEFAULT_SUPERUSER = "cassandra"
_DEFAULT_PASSWORD = "cassandra"


def yaml_overrides(layout: SecureLayout, address: str) -> dict[str, object]:
    """cassandra.yaml entries of secure mode for the node on `address` (the file must then be 0600)."""
    return {
        "authenticator": "PasswordAuthenticator",
        "client_encryption_options": {
            "enabled": True,
            "optional": False,
            "keystore": str(layout.cassandra_keystore(address)),
            "keystore_password": read_secret(layout.keystore_password),
            "store_type": "PKCS12",
            "require_client_auth": False,
        },
    }


def cdc_login(material: SecureMaterial) -> Login:
    return Login(material.cassandra_user, material.cassandra_password(), material.ssl_context())


def _default_login(material: SecureMaterial) -> Login:
    return Login(DEFAULT_SUPERUSER, _DEFAULT_PASSWORD, material.ssl_context())


def answers(address: str, port: int, material: SecureMaterial) -> bool:
    """The node answers CQL over TLS to role `cdc` or, before that role exists, to the default superuser."""
    for login in (cdc_login(material), _default_login(material)):
        if query_release_version(address, port, login=login) is not None:
            return True
    return False


def ensure_cdc_role(address: str, port: int, material: SecureMaterial, *, timeout_s: float = 60.0) -> bool:
    """Make role `cdc` (superuser, password from its file) and retire the default superuser; True if made now.

    Idempotent: when `cdc` can already log in, nothing changes.
    """
    if _can_log_in(address, port, cdc_login(material)):
        return False
    if not _can_log_in(address, port, _default_login(material)):
        raise SecurityMaterialError(
            f"Cassandra {address}:{port} accepts neither role {material.cassandra_user} with the password in "
            f"{material.cassandra_password_file} nor the default superuser: that file does not belong to this "
            "node's data. Restore it, or remove the node's data folder to start over"
        )
    cluster = connect(address, port, login=_default_login(material))
    try:
        session = cluster.connect()
        role = material.cassandra_user
        exists = session.execute("SELECT role FROM system_auth.roles WHERE role = %s", (role,)).one()
        # One statement only: Cassandra 5.0 refuses a second password change of a role within 5 s.
        # The driver quotes the password as a CQL string literal; it is never logged (driver logs at ERROR).
        verb = "ALTER ROLE" if exists else "CREATE ROLE"
        session.execute(
            f"{verb} {role} WITH PASSWORD = %s AND LOGIN = true AND SUPERUSER = true",
            (material.cassandra_password(),),
        )
    finally:
        cluster.shutdown()
    _retire_default_superuser(address, port, material, timeout_s=timeout_s)
    return True


def _retire_default_superuser(address: str, port: int, material: SecureMaterial, *, timeout_s: float) -> None:
    """As `cdc` (a role may not demote itself), remove the login of cassandra/cassandra."""
    deadline = time.monotonic() + timeout_s
    while True:
        cluster = connect(address, port, login=cdc_login(material))
        try:
            with quiet_probe():
                session = cluster.connect()
            session.execute(f"ALTER ROLE {DEFAULT_SUPERUSER} WITH SUPERUSER = false AND LOGIN = false")
            return
        except NoHostAvailable as exc:
            # the credentials cache of the node may still miss the new role for a moment
            if not is_authentication_failure(exc) or time.monotonic() > deadline:
                raise SecurityMaterialError(
                    f"role cdc was created on Cassandra {address}:{port} but cannot log in yet: {exc}"
                ) from exc
            time.sleep(0.5)
        finally:
            cluster.shutdown()


def _can_log_in(address: str, port: int, login: Login) -> bool:
    cluster = connect(address, port, timeout_s=10.0, login=login)
    try:
        with quiet_probe():
            cluster.connect()
        return True
    except NoHostAvailable as exc:
        if is_authentication_failure(exc):
            return False
        raise SecurityMaterialError(f"Cassandra {address}:{port} did not answer a TLS login: {exc}") from exc
    finally:
        cluster.shutdown()
