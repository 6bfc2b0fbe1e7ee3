"""Schema registry clients: the two calls the change codec needs from the Confluent REST API.

``register(subject, schema_json) -> id`` (``POST /subjects/{subject}/versions``) and ``get(id) -> schema``
(``GET /schemas/ids/{id}``). Subjects follow TopicNameStrategy: ``<topic>-key`` and ``<topic>-value``.

A subject's compatibility level is what makes the registry refuse a table schema version that would break
the topic's consumers. Registries differ in what a new subject gets (Confluent's global default is
BACKWARD, Apicurio's is NONE: no check at all), so the HTTP client can set a level on each subject it
creates (``compatibility``; ``GET /subjects/{subject}/versions`` says whether it exists, ``PUT
/config/{subject}`` sets the level before the first schema goes in). Subjects that exist keep their level.

The HTTP client is synchronous (stdlib urllib) on purpose: a worker registers once per table schema
version and once per unknown schema id, and both answers are cached for the life of the process, so the
calls are rare. An asyncio worker should still keep them off its event loop: ``AvroChangeCodec.prepare``
runs the registration in a thread when a table schema arrives, after which encoding never blocks.
"""

from __future__ import annotations

import base64
import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Protocol, get_args

from runtime.config import RegistryCompatibility

_CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"

#: the compatibility levels of the Confluent REST API (``PUT /config/{subject}``)
COMPATIBILITY_LEVELS: tuple[str, ...] = get_args(RegistryCompatibility)

#: Confluent REST API error code of a subject the registry does not know (Apicurio answers it too)
_SUBJECT_NOT_FOUND = 40401

#: what the registry's HTTP statuses mean for a caller (Confluent REST API error codes)
_STATUS_HINTS = {
    401: "unauthorized: check the registry credentials",
    403: "forbidden: the credentials may not use this subject",
    404: "not found",
    409: "incompatible with an earlier version of the subject under its compatibility level",
    422: "the registry rejects the schema as invalid",
}


class SchemaRegistryError(RuntimeError):
    """A registry call that failed; the message names the registry URL and the subject or schema id."""

    def __init__(
        self,
        message: str,
        *,
        url: str,
        subject: str | None = None,
        schema_id: int | None = None,
        status: int | None = None,
        error_code: int | None = None,
    ) -> None:
        super().__init__(message)
        self.url = url
        self.subject = subject
        self.schema_id = schema_id
        self.status = status
        self.error_code = error_code


class SchemaRegistryClient(Protocol):
    """The registry calls the change codec makes."""

    def register(self, subject: str, schema_json: str) -> int:
        """Register (or find) a schema under a subject and return its global id."""
        ...

    def get(self, schema_id: int) -> dict[str, Any]:
        """The schema (parsed JSON) that has this global id."""
        ...


def _redact(url: str) -> str:
    """The URL without its user-info (passwords never reach messages or logs)."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urllib.parse.urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


class HttpSchemaRegistryClient:
    """A Confluent-compatible registry over HTTP(S) (Confluent Schema Registry, Karapace, Redpanda, Apicurio's
    compatibility API).

    ``auth`` is (user, password) for HTTP basic auth; a ``user:password@`` in the URL works too.
    Unreachable registries and 5xx answers are retried ``retries`` times with a growing pause; 4xx answers
    (an incompatible or invalid schema, bad credentials) fail at once. Answers are cached per process.
    ``compatibility`` (one of ``COMPATIBILITY_LEVELS``) is set on every subject this client creates,
    before its first schema; None leaves new subjects to the registry's global level. Several workers
    registering the same new subject at once all get its id (a 409 from losing that race is not an
    incompatible schema).
    """

    def __init__(
        self,
        url: str,
        *,
        timeout: float = 10.0,
        auth: tuple[str, str] | None = None,
        retries: int = 2,
        backoff_s: float = 0.25,
        compatibility: str | None = None,
    ) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"schema registry URL {_redact(url)!r} must be http:// or https://host[:port]")
        if compatibility is not None and compatibility not in COMPATIBILITY_LEVELS:
            raise ValueError(
                f"schema registry compatibility {compatibility!r} must be one of {', '.join(COMPATIBILITY_LEVELS)}"
            )
        self.compatibility = compatibility
        if parts.username is not None and auth is None:
            auth = (urllib.parse.unquote(parts.username), urllib.parse.unquote(parts.password or ""))
        self.url = _redact(url).rstrip("/")
        self.timeout = timeout
        self.retries = max(0, retries)
        self.backoff_s = backoff_s
        self._headers = {"Accept": _CONTENT_TYPE, "Content-Type": _CONTENT_TYPE}
        if auth is not None:
            token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode("ascii")
            self._headers["Authorization"] = f"Basic {token}"
        self._ids: dict[tuple[str, str], int] = {}
        self._schemas: dict[int, dict[str, Any]] = {}
        self._guarded: set[str] = set()

    def __repr__(self) -> str:
        return f"HttpSchemaRegistryClient({self.url!r})"

    def register(self, subject: str, schema_json: str) -> int:
        found = self._ids.get((subject, schema_json))
        if found is not None:
            return found
        if self.compatibility is not None and subject not in self._guarded:
            self._guard_new_subject(subject, self.compatibility)
            self._guarded.add(subject)
        quoted = urllib.parse.quote(subject, safe="")
        body = json.dumps({"schema": schema_json}).encode()
        what = f"registering a schema under subject {subject!r}"
        for attempt in range(2):
            try:
                answer = self._call("POST", f"/subjects/{quoted}/versions", body, what, subject=subject)
                break
            except SchemaRegistryError as exc:
                # Workers starting together register the same first schema at once; Apicurio lets one
                # create the subject and answers the others 409 ("already exists"), the status of an
                # incompatible schema. So a 409 is checked: the schema may be there already, or, if
                # another schema won the race, this one is registered again against it.
                if exc.status != 409:
                    raise
                found = self._lookup(quoted, body, subject)
                if found is not None:
                    answer = {"id": found}
                    break
                if attempt:
                    raise
        schema_id = answer.get("id") if isinstance(answer, dict) else None
        if not isinstance(schema_id, int) or isinstance(schema_id, bool):
            raise SchemaRegistryError(
                f"schema registry {self.url}: registering under subject {subject!r} answered {answer!r}, "
                "not {'id': <int>}",
                url=self.url,
                subject=subject,
            )
        self._ids[(subject, schema_json)] = schema_id
        return schema_id

    def _lookup(self, quoted: str, body: bytes, subject: str) -> int | None:
        """The id of a schema already registered under a subject (``POST /subjects/{subject}``), None
        when it is not there."""
        try:
            answer = self._call(
                "POST",
                f"/subjects/{quoted}",
                body,
                f"looking up a schema under subject {subject!r}",
                subject=subject,
            )
        except SchemaRegistryError as exc:
            if exc.status == 404:
                return None
            raise
        schema_id = answer.get("id") if isinstance(answer, dict) else None
        return schema_id if isinstance(schema_id, int) and not isinstance(schema_id, bool) else None

    def _guard_new_subject(self, subject: str, level: str) -> None:
        """Set ``level`` on a subject that does not exist yet, so the registry checks its second schema
        against the first. A subject that exists keeps the level it has (an operator's choice, or the one
        set when it was created); workers creating it together all want the same level, and the first
        PUT wins."""
        quoted = urllib.parse.quote(subject, safe="")
        try:
            self._call(
                "GET",
                f"/subjects/{quoted}/versions",
                None,
                f"looking up subject {subject!r}",
                subject=subject,
            )
            return
        except SchemaRegistryError as exc:
            if exc.status != 404 or exc.error_code != _SUBJECT_NOT_FOUND:
                raise
        body = json.dumps({"compatibility": level}).encode()
        try:
            answer = self._call(
                "PUT",
                f"/config/{quoted}",
                body,
                f"setting compatibility {level} on new subject {subject!r}",
                subject=subject,
            )
        except SchemaRegistryError as exc:
            # another worker set it a moment ago (Apicurio: 409 "rule already exists"): the subject has
            # a level of its own now, which it keeps
            if exc.status != 409:
                raise
            return
        if (
            not isinstance(answer, dict)
            or answer.get("compatibility", answer.get("compatibilityLevel")) != level
        ):
            raise SchemaRegistryError(
                f"schema registry {self.url}: setting compatibility {level} on new subject {subject!r} "
                f"answered {answer!r:.200}, not {{'compatibility': {level!r}}}",
                url=self.url,
                subject=subject,
            )

    def get(self, schema_id: int) -> dict[str, Any]:
        found = self._schemas.get(schema_id)
        if found is not None:
            return found
        what = f"fetching schema id {schema_id}"
        answer = self._call("GET", f"/schemas/ids/{int(schema_id)}", None, what, schema_id=schema_id)
        text = answer.get("schema") if isinstance(answer, dict) else None
        kind = answer.get("schemaType", "AVRO") if isinstance(answer, dict) else None
        try:
            if not isinstance(text, str) or kind != "AVRO":
                raise ValueError(f"expected an Avro schema, got {answer!r:.200}")
            schema = json.loads(text)
            if not isinstance(schema, dict):
                raise ValueError(f"expected a record schema, got {text:.200}")
        except ValueError as exc:
            raise SchemaRegistryError(
                f"schema registry {self.url}: {what}: {exc}", url=self.url, schema_id=schema_id
            ) from exc
        self._schemas[schema_id] = schema
        return schema

    # -- HTTP

    def _call(
        self,
        method: str,
        path: str,
        body: bytes | None,
        what: str,
        *,
        subject: str | None = None,
        schema_id: int | None = None,
    ) -> Any:
        request = urllib.request.Request(self.url + path, data=body, method=method, headers=self._headers)
        for attempt in range(self.retries + 1):
            last = attempt == self.retries
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    data = response.read()
            except urllib.error.HTTPError as exc:
                error = self._http_error(exc, what, subject, schema_id)
                if exc.code < 500 or last:
                    raise error from exc
            except (urllib.error.URLError, OSError) as exc:
                reason = getattr(exc, "reason", exc)
                if last:
                    raise SchemaRegistryError(
                        f"schema registry {self.url} is unreachable while {what} "
                        f"({self.retries + 1} attempts, timeout {self.timeout:g} s): {reason}",
                        url=self.url,
                        subject=subject,
                        schema_id=schema_id,
                    ) from exc
            else:
                try:
                    return json.loads(data)
                except ValueError as exc:
                    raise SchemaRegistryError(
                        f"schema registry {self.url}: {what}: the answer is not JSON: {data[:200]!r}",
                        url=self.url,
                        subject=subject,
                        schema_id=schema_id,
                    ) from exc
            time.sleep(self.backoff_s * (attempt + 1))
        raise AssertionError("unreachable")  # pragma: no cover

    def _http_error(
        self, exc: urllib.error.HTTPError, what: str, subject: str | None, schema_id: int | None
    ) -> SchemaRegistryError:
        try:
            raw = exc.read()
        except OSError:
            raw = b""
        error_code: int | None = None
        message = raw.decode("utf-8", "replace").strip()[:500]
        try:
            detail = json.loads(raw)
            if isinstance(detail, dict):
                error_code = detail.get("error_code") if isinstance(detail.get("error_code"), int) else None
                message = str(detail.get("message", message))
        except ValueError:
            pass
        hint = _STATUS_HINTS.get(exc.code, "server error" if exc.code >= 500 else "request refused")
        if exc.code == 404 and (error_code is None or error_code < 10_000):
            # the registry's own "not found" answers carry 5-digit codes (40401 subject, 40403 schema); a
            # bare 404 is a path nothing serves, most often a URL without the Confluent API's path
            hint = (
                "no such endpoint: the URL must be the registry's Confluent-compatible API "
                "(Apicurio serves it under /apis/ccompat/v7)"
            )
        code = f", error code {error_code}" if error_code is not None else ""
        return SchemaRegistryError(
            f"schema registry {self.url}: {what} failed with HTTP {exc.code}{code} ({hint}): {message}",
            url=self.url,
            subject=subject,
            schema_id=schema_id,
            status=exc.code,
            error_code=error_code,
        )


class InMemorySchemaRegistryClient:
    """A registry inside the process, for tests, benchmarks and single-process setups where producer and
    consumer share it. Ids are global (the same schema text gets the same id under every subject), as in
    Confluent's registry; there are no compatibility checks."""

    def __init__(self) -> None:
        self.url = "memory://"
        self._lock = threading.Lock()
        self._ids: dict[str, int] = {}
        self._schemas: dict[int, dict[str, Any]] = {}
        self.subjects: dict[str, list[int]] = {}

    def register(self, subject: str, schema_json: str) -> int:
        try:
            schema = json.loads(schema_json)
        except ValueError as exc:
            raise SchemaRegistryError(
                f"schema registry {self.url}: the schema for subject {subject!r} is not JSON: {exc}",
                url=self.url,
                subject=subject,
                status=422,
            ) from exc
        canonical = json.dumps(schema, sort_keys=True, separators=(",", ":"))
        with self._lock:
            schema_id = self._ids.get(canonical)
            if schema_id is None:
                schema_id = self._ids[canonical] = len(self._ids) + 1
                self._schemas[schema_id] = schema
            versions = self.subjects.setdefault(subject, [])
            if schema_id not in versions:
                versions.append(schema_id)
        return schema_id

    def get(self, schema_id: int) -> dict[str, Any]:
        schema = self._schemas.get(schema_id)
        if schema is None:
            raise SchemaRegistryError(
                f"schema registry {self.url}: no schema has id {schema_id}",
                url=self.url,
                schema_id=schema_id,
                status=404,
            )
        return schema
