"""A small HTTP server speaking the two Confluent schema registry endpoints the codecs use, for unit tests.

POST /subjects/{subject}/versions -> {"id"}, GET /schemas/ids/{id} -> {"schema"}, with switches for
failures, auth and delay that a real registry cannot be made to show on cue. Integration tests use the
real registry the session starts (tests/conftest.py `schema_registry`), never this one.
"""

from __future__ import annotations

import base64
import contextlib
import json
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class RegistryState:
    """What the fake registry knows and saw."""

    schemas: dict[str, int] = field(default_factory=dict)
    by_id: dict[int, str] = field(default_factory=dict)
    requests: list[tuple[str, str, dict[str, str], bytes]] = field(default_factory=list)
    fail_next: list[int] = field(default_factory=list)
    password: str | None = None
    delay_s: float = 0.0


class Handler(BaseHTTPRequestHandler):
    server: Any

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass

    def _answer(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _start(self) -> tuple[RegistryState, bytes] | None:
        state: RegistryState = self.server.state
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        state.requests.append((self.command, self.path, dict(self.headers), body))
        if state.delay_s:
            time.sleep(state.delay_s)
        if state.password is not None:
            expected = "Basic " + base64.b64encode(f"user:{state.password}".encode()).decode()
            if self.headers.get("Authorization") != expected:
                self._answer(401, {"error_code": 40101, "message": "Unauthorized"})
                return None
        if state.fail_next:
            status = state.fail_next.pop(0)
            self._answer(status, {"error_code": status * 100 + 1, "message": "Internal Server Error"})
            return None
        return state, body

    def do_POST(self) -> None:
        started = self._start()
        if started is None:
            return
        state, body = started
        parts = self.path.split("/")
        if len(parts) != 4 or parts[1] != "subjects" or parts[3] != "versions":
            self._answer(404, {"error_code": 404, "message": "HTTP 404 Not Found"})
            return
        subject = urllib.parse.unquote(parts[2])
        schema = json.loads(body)["schema"]
        if subject.startswith("incompatible"):
            self._answer(
                409,
                {
                    "error_code": 409,
                    "message": "Schema being registered is incompatible with an earlier schema for subject "
                    f'"{subject}", details: [READER_FIELD_MISSING_DEFAULT_VALUE]',
                },
            )
            return
        if subject.startswith("invalid"):
            self._answer(
                422,
                {
                    "error_code": 42201,
                    "message": "Either the input schema or one of its references is invalid",
                },
            )
            return
        key = json.dumps(json.loads(schema), sort_keys=True)
        schema_id = state.schemas.setdefault(key, len(state.schemas) + 1)
        state.by_id[schema_id] = schema
        self._answer(200, {"id": schema_id})

    def do_GET(self) -> None:
        started = self._start()
        if started is None:
            return
        state, _ = started
        prefix = "/schemas/ids/"
        if not self.path.startswith(prefix):
            self._answer(404, {"error_code": 404, "message": "HTTP 404 Not Found"})
            return
        schema_id = int(self.path[len(prefix) :])
        if schema_id not in state.by_id:
            self._answer(404, {"error_code": 40403, "message": "Schema not found"})
            return
        self._answer(200, {"schema": state.by_id[schema_id]})


@contextlib.contextmanager
def running_registry() -> Iterator[tuple[str, RegistryState]]:
    """The registry's URL and state, served from a thread until the block ends."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.state = RegistryState()  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", server.state  # type: ignore[attr-defined]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
