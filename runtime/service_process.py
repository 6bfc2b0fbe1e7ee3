"""Agents and workers as child processes (`python -m cdc agent|worker --config FILE`), as operators run them.

`cdc verify`, the demo and the benchmarks start, kill (-9), restart and query them over HTTP; each writes
its own log.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

#: how the line that marks each start in a child's log begins (the lines after it are the child's own)
START_MARKER = "==== start "


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on now, chosen by the OS, for a child's HTTP endpoint or a test server
    (another process may take it before the caller binds it, so use it right away)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def environment_without_cdc_overrides() -> dict[str, str]:
    """The caller's environment minus CDC__* overrides, so a child reads exactly its config file."""
    return {k: v for k, v in os.environ.items() if not k.startswith("CDC__")}


class ServiceProcess:
    """One `cdc agent` or `cdc worker` child process: its config file, log, HTTP port and exit code."""

    def __init__(
        self,
        command: str,
        name: str,
        config: dict[str, Any],
        workdir: Path,
        http_port: int,
        *,
        log_format: str = "text",
    ) -> None:
        """``log_format`` "json" for a log a program reads back (the benchmarks), "text" for people."""
        workdir.mkdir(parents=True, exist_ok=True)
        self.command = command
        self.name = name
        self.config = config
        self.config_path = workdir / f"{name}.yaml"
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        self.log_path = workdir / f"{name}.log"
        self.port = http_port
        self.log_format = log_format
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.started_at = 0.0
        """time.monotonic() of the latest start"""

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def pid(self) -> int | None:
        """The child's pid while it runs (for /proc readings); None before its start and after its exit."""
        return self.process.pid if self.process is not None and self.running else None

    def command_line(self, profile_to: Path | None = None) -> list[str]:
        """``python -m cdc COMMAND --config FILE``; under cProfile with ``profile_to`` (its stats file)."""
        profiler = [] if profile_to is None else ["-m", "cProfile", "-o", str(profile_to)]
        return [
            sys.executable,
            *profiler,
            "-m",
            "cdc",
            self.command,
            "--config",
            str(self.config_path),
            "--log-format",
            self.log_format,
        ]

    def start(
        self, env: dict[str, str] | None = None, *, profile_to: Path | None = None, cwd: Path | None = None
    ) -> None:
        """Start (if not running); ``env`` adds variables to a CDC__-free copy of this environment;
        ``profile_to`` runs it under cProfile (stop it with SIGINT: it writes the stats as it unwinds);
        ``cwd`` is its working directory (``python -m`` imports from there first: a benchmark runs another
        checkout's code that way)."""
        if self.running:
            return
        self.starts += 1
        with self.log_path.open("ab") as out:
            out.write(f"\n{START_MARKER}{self.starts} at {time.strftime('%H:%M:%S')}\n".encode())
            out.flush()
            self.process = subprocess.Popen(
                self.command_line(profile_to),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**environment_without_cdc_overrides(), **(env or {})},
                cwd=cwd,
                start_new_session=True,
            )
        self.started_at = time.monotonic()

    def kill(self) -> None:
        """kill -9: no drain, no final commit."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def stop(self, timeout_s: float = 30.0, *, signal_number: int = signal.SIGTERM) -> int | None:
        """SIGTERM (or ``signal_number``) and wait; kill -9 after ``timeout_s``. Returns the exit code."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal_number)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.process.returncode

    def ensure_stopped(self) -> None:
        with contextlib.suppress(Exception):
            self.stop(20)
        self.kill()

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "<no log>"

    def get(self, path: str, timeout_s: float = 5.0, token: str | None = None) -> tuple[int, bytes] | None:
        """(status, body) of a GET on the process's HTTP port; None while nothing answers."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()
        except (OSError, urllib.error.URLError):
            return None

    def get_json(self, path: str, timeout_s: float = 5.0) -> tuple[int, Any] | None:
        got = self.get(path, timeout_s)
        if got is None:
            return None
        try:
            return got[0], json.loads(got[1] or b"null")
        except ValueError:
            return got[0], None

    #: /health statuses of a process that serves: an agent that found segments Cassandra deleted unread
    #: says ``degraded`` and goes on (the loss is reported elsewhere, e.g. by `cdc verify`)
    SERVING = frozenset({"ok", "degraded"})

    def healthy(self) -> bool:
        got = self.get_json("/health", 2.0)
        return got is not None and isinstance(got[1], dict) and got[1].get("status") in self.SERVING

    def check_alive(self) -> None:
        """Fail, with the tail of its log, once the child has exited: waiting on it would only time out."""
        if not self.running:
            raise RuntimeError(
                f"{self.name} exited with {self.process and self.process.returncode}:\n{self.log_tail()}"
            )

    def wait_healthy(self, timeout_s: float, *, poll_s: float = 0.2) -> float:
        """Until /health says it serves (``SERVING``); the seconds since the start (a benchmark reports them)."""
        deadline = time.monotonic() + timeout_s
        while not self.healthy():
            self.check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} not healthy after {timeout_s:.0f} s:\n{self.log_tail()}")
            time.sleep(poll_s)
        return time.monotonic() - self.started_at
