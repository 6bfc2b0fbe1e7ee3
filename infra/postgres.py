"""A throwaway PostgreSQL server in a folder of its own, on loopback: the database a Kafka Connect sink fills.

The server binaries come from the machine (Debian's `postgresql` package puts them in
/usr/lib/postgresql/<version>/bin, not on PATH). `initdb` makes a cluster with trust authentication for
the superuser `postgres`, listening on 127.0.0.1 only and on no unix socket, so it needs no system
folder and never meets another server's socket. PostgreSQL refuses to run as root: under root every
command runs as the `postgres` system user (`runuser`), which then owns the folder.

Durability is off (no fsync, no full-page writes): the data is a test's, rebuilt on the next run, and the
two cores are better spent on the pipeline than on disk syncs.
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from infra.errors import ServiceStartError, ToolchainError
from infra.process import can_connect, require_free_ports, tail

HOST = "127.0.0.1"
#: the system user PostgreSQL runs as when we are root (Debian's package creates it)
SYSTEM_USER = "postgres"
_SEARCH_DIRS = "/usr/lib/postgresql/*/bin"
_INSTALL_HINT = (
    "install the PostgreSQL server with `apt-get install postgresql` (scripts/install-system-deps.sh)"
)

_SETTINGS = """
# written by infra/postgres.py: loopback only, no unix socket, small, no durability (a test database)
listen_addresses = '127.0.0.1'
port = {port}
unix_socket_directories = ''
max_connections = 40
shared_buffers = 32MB
fsync = off
synchronous_commit = off
full_page_writes = off
"""


@dataclass(slots=True, frozen=True)
class PostgresSpec:
    root: Path
    """The server's folder: data/ (the cluster) and postgres.log."""
    port: int = 5432
    user: str = "postgres"
    """The database superuser initdb creates (trust authentication: no password)."""
    database: str = "postgres"

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def log_file(self) -> Path:
        return self.root / "postgres.log"

    @property
    def jdbc_url(self) -> str:
        """The URL a JDBC client (Kafka Connect's JDBC sink) connects with."""
        return f"jdbc:postgresql://{HOST}:{self.port}/{self.database}"

    @property
    def conninfo(self) -> str:
        """The libpq connection string (psycopg, psql)."""
        return f"host={HOST} port={self.port} user={self.user} dbname={self.database}"


def find_postgres_bin() -> Path:
    """The folder holding `initdb`, `pg_ctl` and `postgres`: PATH first, then Debian's versioned folders."""
    found = shutil.which("initdb")
    candidates = [Path(found).resolve().parent] if found else []
    candidates += sorted(Path("/").glob(_SEARCH_DIRS.lstrip("/")), key=_version_key, reverse=True)
    for folder in candidates:
        if all((folder / tool).is_file() for tool in ("initdb", "pg_ctl", "postgres")):
            return folder
    raise ToolchainError(
        f"PostgreSQL's initdb, pg_ctl and postgres were not found on PATH or in {_SEARCH_DIRS}; {_INSTALL_HINT}"
    )


def _version_key(folder: Path) -> tuple[int, ...]:
    version = folder.parent.name
    return tuple(int(part) for part in version.split(".") if part.isdigit())


class PostgresServer:
    """Create (once), start, check and stop one PostgreSQL cluster under `spec.root`."""

    def __init__(self, spec: PostgresSpec, *, start_timeout_s: int = 120) -> None:
        self.spec = spec
        self.start_timeout_s = start_timeout_s
        self._bin: Path | None = None

    @property
    def bin(self) -> Path:
        if self._bin is None:
            self._bin = find_postgres_bin()
        return self._bin

    def is_running(self) -> bool:
        """`pg_ctl status`: the postmaster of this data folder is alive (exit 0), else 3 (or 4: no folder)."""
        if not (self.spec.data / "PG_VERSION").is_file():
            return False
        return self._run(["pg_ctl", "-D", str(self.spec.data), "status"], check=False).returncode == 0

    def start(self) -> float | None:
        """Make the cluster on first use, start it and wait until it takes connections; None if it ran."""
        if self.is_running():
            return None
        require_free_ports(self._what(), [(HOST, self.spec.port)])
        started = time.monotonic()
        self._prepare_root()
        if not (self.spec.data / "PG_VERSION").is_file():
            self._initdb()
        self._run(
            [
                "pg_ctl", "-D", str(self.spec.data), "-l", str(self.spec.log_file), "-w",
                "-t", str(self.start_timeout_s), "start",
            ],
            what="start",
        )  # fmt: skip
        deadline = time.monotonic() + self.start_timeout_s
        while not can_connect(HOST, self.spec.port):
            if time.monotonic() > deadline:
                raise ServiceStartError(
                    f"{self._what()} started but does not accept connections. Last lines of "
                    f"{self.spec.log_file}:\n{tail(self.spec.log_file)}"
                )
            time.sleep(0.2)
        return time.monotonic() - started

    def stop(self) -> bool:
        """Fast shutdown (open sessions are ended, as a test's sink may still hold some); True if it ran."""
        if not self.is_running():
            return False
        self._run(["pg_ctl", "-D", str(self.spec.data), "-m", "fast", "-w", "stop"], what="stop")
        return True

    def log_tail(self, lines: int = 30) -> str:
        return tail(self.spec.log_file, lines)

    # -- internals

    def _as_root(self) -> bool:
        return os.geteuid() == 0

    def _prepare_root(self) -> None:
        """The folder exists and, under root, belongs to the `postgres` user, who can also reach it."""
        root = self.spec.root
        root.mkdir(parents=True, exist_ok=True)
        if not self._as_root():
            return
        try:
            user = pwd.getpwnam(SYSTEM_USER)
        except KeyError:
            raise ToolchainError(
                f"PostgreSQL refuses to run as root and there is no `{SYSTEM_USER}` user to run it as; "
                f"{_INSTALL_HINT} (it creates that user), or run as a normal user"
            ) from None
        for parent in root.resolve().parents:
            mode = parent.stat()
            if mode.st_uid != user.pw_uid and not mode.st_mode & stat.S_IXOTH:
                raise ServiceStartError(
                    f"PostgreSQL runs as user `{SYSTEM_USER}`, who cannot enter {parent} (mode "
                    f"{stat.filemode(mode.st_mode)}) on the way to {root}; put the server's folder "
                    "elsewhere (temporary_postgres uses the system's temporary folder)"
                )
        os.chown(root, user.pw_uid, user.pw_gid)
        if self.spec.log_file.exists():
            os.chown(self.spec.log_file, user.pw_uid, user.pw_gid)

    def _initdb(self) -> None:
        self._run(
            [
                "initdb", "-D", str(self.spec.data), "-U", self.spec.user, "-A", "trust", "-E", "UTF8",
                "--locale=C", "-N",
            ],
            what="initdb",
        )  # fmt: skip
        with (self.spec.data / "postgresql.conf").open("a") as conf:
            conf.write(_SETTINGS.format(port=self.spec.port))

    def _run(
        self, argv: list[str], *, what: str = "", check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        command = [str(self.bin / argv[0]), *argv[1:]]
        if self._as_root():
            command = ["runuser", "-u", SYSTEM_USER, "--", *command]
        done = subprocess.run(
            command, capture_output=True, text=True, cwd=self.spec.root, timeout=self.start_timeout_s + 30
        )
        if check and done.returncode != 0:
            output = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
            raise ServiceStartError(
                f"PostgreSQL `{what or argv[0]}` failed (exit {done.returncode}) for {self.spec.data}:\n"
                f"{output}\nLast lines of {self.spec.log_file}:\n{tail(self.spec.log_file, 15)}"
            )
        return done

    def _what(self) -> str:
        return f"PostgreSQL ({HOST}:{self.spec.port}, {self.spec.data})"


@contextmanager
def temporary_postgres(port: int, *, start_timeout_s: int = 120) -> Iterator[PostgresServer]:
    """A PostgreSQL server in a new folder of the system's temporary folder, removed after the block.

    Not under a test's tmp_path: that lies in a folder only root may enter, and the server runs as
    `postgres` under root.
    """
    root = Path(tempfile.mkdtemp(prefix="cdc-postgres-"))
    server = PostgresServer(PostgresSpec(root=root, port=port), start_timeout_s=start_timeout_s)
    try:
        server.start()
        yield server
    finally:
        try:
            server.stop()
        finally:
            shutil.rmtree(root, ignore_errors=True)
