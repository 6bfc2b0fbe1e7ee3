"""The `cdc_raw_full` fault's filler: CDC writes to one node until its cdc_raw is full and Cassandra
rejects CDC writes (`cdc_block_writes: true`, the default).

A node counts every commit-log segment holding CDC data against `cdc_total_space` until its consumer (our
agent) deletes it from cdc_raw. With the agent stopped, the workload alone would take hours to fill a
node's 1 GiB, so the fault writes large blobs to a table of its own: keyspace `<run keyspace>_fill`,
replication factor 1, so only the target node's cdc_raw fills, and one partition key owned by that node,
written over and over, so its memtable and sstables hold one blob, not the gigabyte. The writes go to that
node as coordinator. Cassandra 5.0 reports the rejection to the client as a bare WriteFailure (reason
UNKNOWN), so the node's log, which names the keyspace it rejected, confirms what the failure was. The agents read only
the run's keyspace, so the filler never reaches Kafka; the target's agent reads past it when it starts.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path

from cassandra import CDCWriteFailure, ConsistencyLevel, WriteFailure
from cassandra.cluster import Cluster, ExecutionProfile, Session
from cassandra.policies import WhiteListRoundRobinPolicy
from cassandra.query import PreparedStatement

#: one blob per write: two fit a default 8 MiB segment, under its 4 MiB largest mutation
BLOB_BYTES = 3 * 1024 * 1024
TABLE = "fill"


class FillError(RuntimeError):
    """The filler could not make the node reject CDC writes (it names the node and what it wrote)."""


@dataclass(slots=True)
class FillResult:
    bytes_written: int
    seconds: float
    #: the CDC bytes on disk the node reported when it rejected the write (its log line, without the path)
    cdc_bytes_on_disk: int | None


def refused(exc: Exception) -> bool:
    """Whether the coordinator refused the write (as a full cdc_raw does; the node's log says why)."""
    return isinstance(exc, (CDCWriteFailure, WriteFailure))


def rejection_logged(log: Path, since: int, keyspace: str) -> str | None:
    """The node's "Rejecting mutation to keyspace <keyspace>" line written after byte ``since`` of its
    log, if any."""
    marker = f"Rejecting mutation to keyspace {keyspace}."
    with log.open("rb") as f:
        f.seek(since)
        for line in f.read().decode("utf-8", "replace").splitlines():
            if marker in line:
                return line.strip()
    return None


class CdcRawFiller:
    """Fills one node's cdc_raw through the run's session."""

    def __init__(self, session: Session, cluster: Cluster, run_keyspace: str) -> None:
        self.session = session
        self.cluster = cluster
        self.keyspace = f"{run_keyspace}_fill"
        self._insert: PreparedStatement | None = None
        self._keys: dict[str, int] = {}
        self._profiles: set[str] = set()

    def _prepare(self) -> PreparedStatement:
        if self._insert is None:
            self.session.execute(
                f"CREATE KEYSPACE IF NOT EXISTS {self.keyspace} WITH replication = "
                "{'class': 'SimpleStrategy', 'replication_factor': 1}"
            )
            self.session.execute(
                f"CREATE TABLE IF NOT EXISTS {self.keyspace}.{TABLE} (k int PRIMARY KEY, b blob) "
                "WITH cdc = true AND compaction = {'class': 'SizeTieredCompactionStrategy'}"
            )
            self.cluster.control_connection.wait_for_schema_agreement()
            self._insert = self.session.prepare(f"INSERT INTO {self.keyspace}.{TABLE} (k, b) VALUES (?, ?)")
        return self._insert

    def key_on(self, address: str) -> int:
        """A partition key whose one replica is the node at ``address``."""
        if address in self._keys:
            return self._keys[address]
        insert = self._prepare()
        self.cluster.refresh_schema_metadata()
        for key in range(10_000):
            routing = insert.bind((key, b"")).routing_key
            replicas = self.cluster.metadata.get_replicas(self.keyspace, routing)
            if [str(h.address) for h in replicas] == [address]:
                self._keys[address] = key
                return key
        raise FillError(f"no key of {self.keyspace}.{TABLE} found with its replica on {address}")

    def _coordinated_by(self, address: str) -> str:
        """An execution profile whose only coordinator is the node at ``address``."""
        name = f"cdc-raw-fill-{address}"
        if name not in self._profiles:
            profile = ExecutionProfile(
                load_balancing_policy=WhiteListRoundRobinPolicy([address]),
                consistency_level=ConsistencyLevel.ONE,
                request_timeout=60.0,
            )
            self.cluster.add_execution_profile(name, profile)
            self._profiles.add(name)
        return name

    def fill(self, address: str, log: Path, limit_bytes: int, timeout_s: float = 600.0) -> FillResult:
        """Write blobs owned by ``address`` until Cassandra rejects one for a full cdc_raw (its ``log``
        says so); FillError after ``limit_bytes`` (say, one and a half times cdc_total_space) without a rejection, or
        after ``timeout_s``."""
        since = log.stat().st_size
        insert = self._prepare()
        key = self.key_on(address)
        profile = self._coordinated_by(address)
        blob = bytes(BLOB_BYTES)
        written = 0
        started = time.monotonic()
        while written < limit_bytes:
            if time.monotonic() - started > timeout_s:
                break
            try:
                self.session.execute(insert, (key, blob), execution_profile=profile)
            except Exception as exc:
                line = rejection_logged(log, since, self.keyspace) if refused(exc) else None
                if line is None:
                    raise
                found = re.search(r"Total CDC bytes on disk is (\d+)", line)
                return FillResult(written, time.monotonic() - started, int(found[1]) if found else None)
            written += len(blob)
        raise FillError(
            f"{address} still took CDC writes after {written / 2**20:.0f} MiB in "
            f"{time.monotonic() - started:.0f} s (its cdc_total_space or cdc_block_writes differ from "
            "the run's settings)"
        )

    def accepted(self, address: str) -> bool:
        """Whether the node takes a small CDC write again (its cdc_raw has room)."""
        insert = self._prepare()
        try:
            self.session.execute(
                insert, (self.key_on(address), b"\x00"), execution_profile=self._coordinated_by(address)
            )
        except Exception as exc:
            if refused(exc):
                return False
            raise
        return True
