"""The local secured services (`cdc infra up --secure`) as client configuration.

infra/ makes the files of secure mode (a local CA, password files: `infra.secure.SecureMaterial`) and may
not import runtime/, so this bridge lives in cdc/. It gives the same settings in two forms:

- typed, for clients made in this process: `kafka_security(material)` is the `kafka.security` section
  (SASL_SSL, SCRAM-SHA-512, user `cdc`, the password a `Secret` read from its file, the local CA), and
  `kafka_config(material, ...)`, `cassandra_config(material, ...)` are whole sections with it (plaintext
  when `material` is None);
- YAML, for the configs written for `cdc agent|worker` child processes: `kafka_yaml(material)`,
  `cassandra_yaml(material)` and `with_security(config, material)`. Passwords appear there only as
  `file:<path>` references, never as values, so a config file or its dump can be shown or kept anywhere.

`local_material(stack)` is the material of a `LocalStack` when its settings are secure, else None, so a
caller writes one path for both modes:

    material = local_material(stack)
    kafka = kafka_config(material, bootstrap_servers=stack.kafka.spec.bootstrap)
    config = with_security({"kafka": {...}, "cassandra": {...}, "agent": {...}}, material)
"""

from __future__ import annotations

import copy
from typing import Any, Final

from infra.secure import SecureMaterial
from infra.stack import LocalStack
from runtime.config import CassandraConfig, CassandraTlsConfig, KafkaConfig, KafkaSecurityConfig
from runtime.secrets import Secret

KAFKA_PROTOCOL: Final = "SASL_SSL"
SASL_MECHANISM: Final = "SCRAM-SHA-512"
"""The strongest mechanism the local broker offers (it also offers SCRAM-SHA-256 and PLAIN)."""
FILE_PREFIX: Final = "file:"


def local_material(stack: LocalStack) -> SecureMaterial | None:
    """The secure material of `stack` when its settings are secure (files made on first use), else None."""
    return stack.secure_material() if stack.settings.secure else None


def _file_secret(path: object) -> Secret:
    """A Secret read from a password file, as the config loader reads `file:<path>` (source `file <path>`)."""
    return Secret.resolve(f"{FILE_PREFIX}{path}", {})


# --- typed sections, for clients made in this process -------------------------------------------------


def kafka_security(material: SecureMaterial) -> KafkaSecurityConfig:
    """`kafka.security` for the local broker: SASL_SSL, SCRAM-SHA-512, the password read from its file.

    Raises ValueError (naming the path, not the value) when the password file cannot be read."""
    return KafkaSecurityConfig(
        protocol=KAFKA_PROTOCOL,
        sasl_mechanism=SASL_MECHANISM,
        username=material.kafka_user,
        password=_file_secret(material.kafka_password_file),
        ca_file=material.ca_file,
    )


def cassandra_tls(material: SecureMaterial) -> CassandraTlsConfig:
    """`cassandra.tls` for the local nodes: TLS on, trusting the local CA (no client certificate)."""
    return CassandraTlsConfig(enabled=True, ca_file=material.ca_file)


def kafka_config(material: SecureMaterial | None, **fields: Any) -> KafkaConfig:
    """`KafkaConfig(**fields)` with the local broker's security; plaintext (exactly `KafkaConfig(**fields)`)
    when `material` is None. With material, bootstrap_servers defaults to the secured broker's."""
    if material is None:
        return KafkaConfig(**fields)
    fields.setdefault("bootstrap_servers", material.kafka_bootstrap)
    return KafkaConfig(**fields, security=kafka_security(material))


def cassandra_config(material: SecureMaterial | None, **fields: Any) -> CassandraConfig:
    """`CassandraConfig(**fields)` with the local nodes' role, password and TLS; plaintext (exactly
    `CassandraConfig(**fields)`) when `material` is None. With material, contact_points and port default
    to the secured node's."""
    if material is None:
        return CassandraConfig(**fields)
    fields.setdefault("contact_points", [material.cassandra_host])
    fields.setdefault("port", material.cql_port)
    return CassandraConfig(
        **fields,
        username=material.cassandra_user,
        password=_file_secret(material.cassandra_password_file),
        tls=cassandra_tls(material),
    )


# --- YAML, for the configs of child processes -----------------------------------------------------------


def kafka_yaml(material: SecureMaterial) -> dict[str, Any]:
    """The `kafka.security` section as YAML data: the password as `file:<path>`, never its value."""
    return {
        "protocol": KAFKA_PROTOCOL,
        "sasl_mechanism": SASL_MECHANISM,
        "username": material.kafka_user,
        "password": f"{FILE_PREFIX}{material.kafka_password_file}",
        "ca_file": str(material.ca_file),
    }


def cassandra_yaml(material: SecureMaterial) -> dict[str, Any]:
    """The keys the `cassandra` section gains as YAML data (username, password as `file:<path>`, tls)."""
    return {
        "username": material.cassandra_user,
        "password": f"{FILE_PREFIX}{material.cassandra_password_file}",
        "tls": {"enabled": True, "ca_file": str(material.ca_file)},
    }


def with_security(config: dict[str, Any], material: SecureMaterial | None) -> dict[str, Any]:
    """A copy of `config` (the YAML data of a `cdc agent|worker` config) with the local services' security:
    `kafka.security` in its kafka section, the login and TLS in its cassandra section (each only when the
    config has that section). `config` itself is not changed; with `material` None the copy is equal to it.
    """
    out = copy.deepcopy(config)
    if material is None:
        return out
    if isinstance(out.get("kafka"), dict):
        out["kafka"]["security"] = kafka_yaml(material)
    if isinstance(out.get("cassandra"), dict):
        out["cassandra"].update(cassandra_yaml(material))
    return out
