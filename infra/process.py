"""Child JVMs that outlive the command starting them: pid files, liveness, ports, log tails, stopping."""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from infra.errors import PortInUseError, ServiceStartError


@dataclass(slots=True, frozen=True)
class ManagedProcess:
    """A background process known by its pid file; `marker` must appear in its command line.

    The marker guards against pid reuse: a stale pid file pointing at an unrelated process reads as
    not running.
    """

    name: str
    pid_file: Path
    log_file: Path
    marker: str

    def pid(self) -> int | None:
        try:
            pid = int(self.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            return None
        # The command line reads empty for a moment while the java launcher re-executes itself.
        if cmdline and self.marker not in cmdline:
            return None
        with contextlib.suppress(OSError):
            state = Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0]
            if state == "Z":
                return None
        return pid

    def is_running(self) -> bool:
        return self.pid() is not None

    def start(
        self, argv: Sequence[str], *, env: dict[str, str] | None = None, cwd: Path | None = None
    ) -> int:
        """Start `argv` in its own session with output appended to the log file; returns the pid."""
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        self.pid_file.parent.mkdir(parents=True, exist_ok=True)
        with self.log_file.open("ab") as out:
            out.write(f"\n==== {time.strftime('%Y-%m-%d %H:%M:%S')} starting {self.name}\n".encode())
            out.flush()
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=cwd,
                start_new_session=True,
            )
        self.pid_file.write_text(f"{proc.pid}\n")
        return proc.pid

    def stop(self, timeout_s: float = 90.0) -> bool:
        """SIGTERM (JVM shutdown hooks drain and close), then SIGKILL after `timeout_s`; True if it ran."""
        pid = self.pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return False
        _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            _reap(pid)
            if self.pid() is None:
                break
            time.sleep(0.2)
        else:
            self._kill(pid)
        self.pid_file.unlink(missing_ok=True)
        return True

    def kill(self) -> bool:
        """SIGKILL, no shutdown hooks (a crash, as kill -9); True if it ran."""
        pid = self.pid()
        if pid is not None:
            self._kill(pid)
        self.pid_file.unlink(missing_ok=True)
        return pid is not None

    def _kill(self, pid: int) -> None:
        """SIGKILL, and wait until the process is gone."""
        _signal(pid, signal.SIGKILL)
        while self.pid() is not None:
            _reap(pid)
            time.sleep(0.1)

    def log_tail(self, lines: int = 30) -> str:
        return tail(self.log_file, lines)


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def _reap(pid: int) -> None:
    """Collect the exit status when the process is our own child, so it does not linger as a zombie."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def tail(path: Path, lines: int = 30) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            data = f.read().decode(errors="replace")
    except FileNotFoundError:
        return f"(no log at {path})"
    return "\n".join(data.splitlines()[-lines:])


def port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


def require_free_ports(service: str, endpoints: Sequence[tuple[str, int]]) -> None:
    taken = [f"{h}:{p}" for h, p in endpoints if not port_is_free(h, p)]
    if taken:
        raise PortInUseError(
            f"{service} cannot start: {', '.join(taken)} already in use by another process "
            f"(find it with `ss -ltnp | grep :{taken[0].rsplit(':', 1)[1]}`, stop it, or run `cdc infra down`)"
        )


#: where Linux keeps the range of local ports it hands to outgoing connections
LOCAL_PORT_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def ephemeral_port_range(source: Path = LOCAL_PORT_RANGE) -> tuple[int, int] | None:
    """The kernel's ephemeral port range (``32768 60999`` by default), or None where it cannot be read."""
    try:
        low, high = (int(part) for part in source.read_text().split())
    except (OSError, ValueError):
        return None
    return low, high


def ephemeral_port_warnings(ports: Mapping[str, int], source: Path = LOCAL_PORT_RANGE) -> list[str]:
    """A warning for each service port in the ephemeral range: any client connection may take such a
    port as its source port while the service is down, and the service's restart then cannot bind it."""
    span = ephemeral_port_range(source)
    if span is None:
        return []
    low, high = span
    return [
        f"warning: {name} port {port} lies in the kernel's ephemeral port range {low}-{high} "
        f"({source}): a restart can find it taken by a client's outgoing connection; choose a port below "
        f"{low}"
        for name, port in ports.items()
        if low <= port <= high
    ]


def can_connect(host: str, port: int, timeout_s: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def wait_until_ready(
    proc: ManagedProcess,
    ready: Callable[[], bool],
    *,
    timeout_s: float,
    what: str,
) -> float:
    """Poll `ready` until it holds; fail fast, with the log tail, if the process dies meanwhile."""
    started = time.monotonic()
    while True:
        if not proc.is_running():
            raise ServiceStartError(
                f"{what} exited during start-up. Last lines of {proc.log_file}:\n{proc.log_tail()}"
            )
        if ready():
            return time.monotonic() - started
        if time.monotonic() - started > timeout_s:
            raise ServiceStartError(
                f"{what} did not become ready within {timeout_s:.0f} s (raise CDC_START_TIMEOUT_S if the machine "
                f"is slow). Last lines of {proc.log_file}:\n{proc.log_tail()}"
            )
        time.sleep(0.5)
