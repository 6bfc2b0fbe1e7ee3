"""Secret values of the configuration (passwords), which print as `***` wherever they go.

A secret is given in the config in one of three forms:

- `file:/run/secrets/kafka-password`: the content of a file (a mounted secret), one trailing newline removed;
- `${KAFKA_PASSWORD}`: the value of an environment variable, taken as it is (so a password that itself
  starts with `file:` or looks like `${...}` can be given this way);
- anything else: the text itself.

The source is read once, when the config is loaded, so a missing variable or an unreadable file stops the
process at start with an error naming the config key, the variable or the path, and never the value.

`repr`, `str`, `format` (f-strings, `%s`), `dataclasses.asdict` and config dumps all show `***`; only
`reveal()` returns the value, at the one place a client library needs it. Pickling carries the value
(Spark ships the config to its executors, which may not have the variable or the file), but nothing
that turns the pickled object into text shows it.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

MASK = "***"

_ENV_REFERENCE = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")
_FILE_PREFIX = "file:"


class Secret:
    """A password or other secret text; see the module docstring. Immutable."""

    __slots__ = ("_source", "_value")

    _value: str
    _source: str

    def __init__(self, value: str, source: str = "inline") -> None:
        if not isinstance(value, str):
            raise TypeError(f"a secret is text, not {type(value).__name__}")
        object.__setattr__(self, "_value", value)
        object.__setattr__(self, "_source", source)

    @classmethod
    def resolve(cls, text: str, environ: Mapping[str, str]) -> Secret:
        """The secret that config text `text` stands for (inline, `${VAR}` or `file:/path`).

        Raises ValueError naming the variable or the path (never a value); the caller adds the config key.
        """
        match = _ENV_REFERENCE.match(text.strip())
        if match:
            name = match[1]
            if name not in environ:
                raise ValueError(
                    f"environment variable {name} is not set (the secret is given as ${{{name}}})"
                )
            return cls(environ[name], f"environment variable {name}")
        if text.startswith(_FILE_PREFIX):
            path = Path(text[len(_FILE_PREFIX) :].strip()).expanduser()
            if not str(path) or str(path) == ".":
                raise ValueError("expected a path after 'file:'")
            try:
                value = path.read_text()
            except FileNotFoundError:
                raise ValueError(f"secret file {path} does not exist") from None
            except PermissionError:
                raise ValueError(
                    f"secret file {path} is not readable by this user (permission denied)"
                ) from None
            except IsADirectoryError:
                raise ValueError(f"secret file {path} is a directory, not a file") from None
            except UnicodeDecodeError:
                raise ValueError(f"secret file {path} is not UTF-8 text") from None
            except OSError as exc:
                raise ValueError(f"cannot read secret file {path}: {exc.strerror}") from None
            if value.endswith("\n"):
                value = value[:-2] if value.endswith("\r\n") else value[:-1]
            if not value:
                raise ValueError(f"secret file {path} is empty")
            return cls(value, f"file {path}")
        return cls(text, "inline")

    def reveal(self) -> str:
        """The secret itself: pass it to the client library, never to a log, an error or a metric."""
        return self._value

    @property
    def source(self) -> str:
        """Where the value came from (`inline`, `environment variable X`, `file /path`); not the value."""
        return self._source

    def __repr__(self) -> str:
        return MASK

    def __str__(self) -> str:
        return MASK

    def __format__(self, spec: str) -> str:
        return format(MASK, spec)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Secret):
            return NotImplemented
        return hmac.compare_digest(self._value.encode(), other._value.encode())

    def __hash__(self) -> int:
        return hash((Secret, self._value))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("a Secret is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("a Secret is immutable")

    def __reduce__(self) -> tuple[Any, ...]:
        # the value travels (Spark executors need it); the source is kept for messages
        return (Secret, (self._value, self._source))

    def __copy__(self) -> Secret:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Secret:
        return self


def scrub(text: str, secrets: Iterable[Secret | None]) -> str:
    """`text` (say, a library's error message) with every occurrence of the given secrets' values masked."""
    for secret in secrets:
        if secret is not None and secret.reveal():
            text = text.replace(secret.reveal(), MASK)
    return text
