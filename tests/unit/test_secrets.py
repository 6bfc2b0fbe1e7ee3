"""Secrets: inline, ${ENV} or file:, resolved once, printed as *** everywhere, carried through pickling."""

from __future__ import annotations

import copy
import logging
import os
import pickle
from dataclasses import asdict
from pathlib import Path

import pytest

from runtime.config import ConfigError, dump_config, load_config
from runtime.secrets import MASK, Secret, scrub

VALUE = "pa55-w0rd!"


def test_inline_env_and_file_sources(tmp_path: Path) -> None:
    file = tmp_path / "pw"
    file.write_text(VALUE + "\n")
    assert Secret.resolve(VALUE, {}).reveal() == VALUE
    assert Secret.resolve(VALUE, {}).source == "inline"
    from_env = Secret.resolve("${KAFKA_PW}", {"KAFKA_PW": VALUE})
    assert from_env.reveal() == VALUE and from_env.source == "environment variable KAFKA_PW"
    from_file = Secret.resolve(f"file:{file}", {})
    assert from_file.reveal() == VALUE, "one trailing newline is dropped"
    assert from_file.source == f"file {file}"


def test_file_keeps_all_but_one_trailing_newline(tmp_path: Path) -> None:
    file = tmp_path / "pw"
    file.write_text(" spaced \n\n")
    assert Secret.resolve(f"file:{file}", {}).reveal() == " spaced \n"


def test_environment_value_is_taken_verbatim() -> None:
    """A password that looks like a reference is given through a variable, which is not read again."""
    assert Secret.resolve("${P}", {"P": "file:/etc/passwd"}).reveal() == "file:/etc/passwd"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("${MISSING_VAR}", r"environment variable MISSING_VAR is not set"),
        ("file:/nonexistent/secret", r"secret file /nonexistent/secret does not exist"),
        ("file:", r"expected a path after 'file:'"),
    ],
)
def test_unresolvable_sources_say_which(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Secret.resolve(text, {})


def test_unreadable_and_empty_files(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(ValueError, match=rf"secret file {empty} is empty"):
        Secret.resolve(f"file:{empty}", {})
    with pytest.raises(ValueError, match=r"is a directory"):
        Secret.resolve(f"file:{tmp_path}", {})
    locked = tmp_path / "locked"
    locked.write_text(VALUE)
    locked.chmod(0)
    if os.access(locked, os.R_OK):
        pytest.skip("running as root: permissions do not stop reads")
    with pytest.raises(ValueError, match=rf"secret file {locked} is not readable"):
        Secret.resolve(f"file:{locked}", {})


def test_every_string_form_is_masked(caplog: pytest.LogCaptureFixture) -> None:
    secret = Secret(VALUE)
    forms = [
        repr(secret),
        str(secret),
        f"{secret}",
        f"{secret!r}",
        f"{secret:>5}",
        "%s" % secret,  # noqa: UP031
        "%r" % secret,  # noqa: UP031
        "{}".format(secret),  # noqa: UP032
    ]
    assert all(VALUE not in form for form in forms)
    assert forms[0] == forms[1] == MASK
    with caplog.at_level(logging.INFO):
        logging.getLogger("test").info("password %s / %r", secret, secret)
    assert VALUE not in caplog.text and MASK in caplog.text
    assert VALUE not in repr([secret, {"password": secret}])


def test_secret_is_immutable_and_compares_by_value() -> None:
    secret = Secret(VALUE)
    with pytest.raises(AttributeError):
        secret._value = "other"  # type: ignore[misc]
    assert not hasattr(secret, "__dict__")
    assert secret == Secret(VALUE, "file /x") and secret != Secret("other")
    assert secret != VALUE, "a secret is not a str"
    assert len({secret, Secret(VALUE)}) == 1


def test_pickling_carries_the_value_copies_keep_it() -> None:
    secret = Secret(VALUE, "environment variable KAFKA_PW")
    restored = pickle.loads(pickle.dumps(secret))
    assert restored.reveal() == VALUE and restored.source == secret.source
    assert repr(restored) == MASK
    assert copy.deepcopy(secret) is secret and copy.copy(secret) is secret


def test_scrub_masks_values_in_foreign_text() -> None:
    assert scrub(f"login failed for {VALUE}", [Secret(VALUE), None]) == "login failed for ***"


def test_config_repr_asdict_dump_and_pickle(tmp_path: Path) -> None:
    config_file = tmp_path / "cdc.yaml"
    config_file.write_text(
        "kafka:\n  security:\n    protocol: SASL_PLAINTEXT\n    sasl_mechanism: SCRAM-SHA-512\n"
        "    username: cdc\n    password: ${KAFKA_PW}\n"
        f"cassandra:\n  username: cdc\n  password: {VALUE}\n"
    )
    config = load_config(config_file, environ={"KAFKA_PW": VALUE})
    assert config.kafka.security.password is not None
    assert config.kafka.security.password.reveal() == VALUE
    assert config.cassandra.password is not None and config.cassandra.password.reveal() == VALUE
    assert VALUE not in repr(config) and "password=***" in repr(config)
    assert VALUE not in str(asdict(config))
    dumped = dump_config(config)
    assert dumped["kafka"]["security"]["password"] == MASK and dumped["cassandra"]["password"] == MASK
    assert VALUE not in str(dumped)
    restored = pickle.loads(pickle.dumps(config))  # what Spark ships to executors
    assert restored == config
    assert restored.kafka.security.password is not None
    assert restored.kafka.security.password.reveal() == VALUE


def test_config_errors_about_secrets_never_show_the_value(tmp_path: Path) -> None:
    config_file = tmp_path / "cdc.yaml"
    config_file.write_text("cassandra:\n  username: cdc\n  password: 0123\n")
    with pytest.raises(ConfigError) as caught:
        load_config(config_file, environ={})
    assert "cassandra.password" in str(caught.value) and "quote the value" in str(caught.value)
    assert "0123" not in str(caught.value) and "83" not in str(caught.value)
