"""Faults `cdc verify` injects while the workload runs, at chosen points of its progress.

Each kind exercises one promise of the correctness contract: an agent killed with -9 resumes from its
saved offsets; a worker killed with -9 leaves an open transaction that its successor aborts; a broker
restart makes every producer retry; a stopped Cassandra node misses writes that reach it later as hints; a
node killed with -9 (no flush) replays its commit log, and its agent must not lose or repeat what the
replay rewrites; a worker paused with SIGSTOP past its session timeout wakes as a zombie whose partitions
moved, and must not commit; the workers' connections to the broker cut right after a commit request
(cdc/verify/commit_cut.py) leave a worker not knowing whether its batch committed, and it must find out
rather than emit the batch again; a node whose agent is stopped until its cdc_raw is full rejects CDC
writes (cdc/verify/cdc_raw_fill.py), and once the agent is back every write the cluster accepted must
still arrive.

Restarts go through the run's LocalStack, so secured services come back secured (settings.secure). With
passwords on, Cassandra reads a role (every login, and the superuser check of every query, cached for 2 s)
from system_auth at LOCAL_QUORUM; with its default replication factor 1 the role lives on one node, and
stopping that node would stop the whole cluster answering. `replicate_logins` puts system_auth on every
node before any fault.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from cassandra import ConsistencyLevel, OperationTimedOut
from cassandra.cluster import Cluster, Session
from cassandra.connection import ConnectionException
from cassandra.query import SimpleStatement

from cdc.verify.cdc_raw_fill import CdcRawFiller
from cdc.verify.commit_cut import CommitCutter
from infra.stack import LocalStack
from runtime.service_process import ServiceProcess

KINDS = ("agent", "worker", "broker", "node", "worker_pause", "node_kill", "commit_cut", "cdc_raw_full")
#: the kinds `cdc verify` tested first; the test run's one-of-each uses them (each newer kind has its own test)
CLASSIC_KINDS = ("agent", "worker", "broker", "node")
AUTH_KEYSPACE = "system_auth"
#: seconds to wait before each further attempt to bring a stopped service back
RESTART_BACKOFF_S = (3.0, 10.0)


class ServiceLost(Exception):
    """A service a fault stopped did not come back: what follows in the run would measure nothing."""

    def __init__(self, service: str, attempts: int, reason: str) -> None:
        super().__init__(f"{service} did not come back after {attempts} attempts to restart it: {reason}")
        self.service = service
        self.reason = reason


def restart(
    service: str, start: Callable[[], object], backoff_s: tuple[float, ...] = RESTART_BACKOFF_S
) -> None:
    """Start a service a fault stopped, retried after each pause of ``backoff_s``; ServiceLost names the
    service and the last failure (e.g. its port taken by a client's outgoing connection)."""
    attempts = len(backoff_s) + 1
    for attempt in range(attempts):
        try:
            start()
            return
        except Exception as exc:
            if attempt == attempts - 1:
                raise ServiceLost(service, attempts, str(exc) or repr(exc)) from exc
            time.sleep(backoff_s[attempt])


def replicate_logins(session: Session, cluster: Cluster, nodes: int) -> bool:
    """Secure mode: system_auth replicated to all `nodes`, so a stopped node takes no role with it.

    Raises the replication factor (True when it did), then reads every system_auth table at ALL: the
    read repairs what the new replicas lack (roles, password hashes), as `nodetool repair system_auth`
    would. Idempotent."""
    row = session.execute(
        "SELECT replication FROM system_schema.keyspaces WHERE keyspace_name = %s", (AUTH_KEYSPACE,)
    ).one()
    raised = int(row.replication.get("replication_factor", "1")) < nodes
    if raised:
        session.execute(
            f"ALTER KEYSPACE {AUTH_KEYSPACE} WITH replication = "
            f"{{'class': 'SimpleStrategy', 'replication_factor': {nodes}}}"
        )
        wait_for_schema_agreement(cluster)
    tables = session.execute(
        "SELECT table_name FROM system_schema.tables WHERE keyspace_name = %s", (AUTH_KEYSPACE,)
    )
    for name in sorted(r.table_name for r in tables):
        statement = SimpleStatement(
            f'SELECT * FROM {AUTH_KEYSPACE}."{name}"', consistency_level=ConsistencyLevel.ALL
        )
        list(session.execute(statement))
    return raised


def wait_for_schema_agreement(cluster: Cluster, timeout_s: float = 120.0) -> None:
    """The driver's wait for schema agreement, again when its control connection was on a node a fault
    stopped (the driver reconnects it to another node)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            cluster.control_connection.wait_for_schema_agreement()
            return
        except (ConnectionException, OperationTimedOut):
            if time.monotonic() > deadline:
                raise
            time.sleep(1.0)


@dataclass(slots=True)
class FaultRecord:
    kind: str
    target: str
    at_operation: int
    started_s: float
    recovered_s: float | None = None
    error: str | None = None
    #: what the fault did, when its kind says more than its target (e.g. how much filled cdc_raw)
    detail: str | None = None

    def as_dict(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "target": self.target,
            "at_operation": self.at_operation,
            "started_s": round(self.started_s, 2),
            "recovered_s": None if self.recovered_s is None else round(self.recovered_s, 2),
            "error": self.error,
            "detail": self.detail,
        }


@dataclass(slots=True)
class FaultPlan:
    """Which faults fire after how many operations (spread evenly over the run, in a seeded order)."""

    schedule: list[tuple[int, str]]

    @classmethod
    def spread(cls, kinds: list[str], count: int, operations: int, seed: int) -> FaultPlan:
        if not kinds or count <= 0:
            return cls([])
        rng = random.Random(seed)
        chosen = [kinds[i % len(kinds)] for i in range(count)]
        rng.shuffle(chosen)
        step = operations / (count + 1)
        return cls([(int(step * (i + 1)), kind) for i, kind in enumerate(chosen)])


@dataclass(slots=True)
class FaultInjector:
    """Fires the plan's faults from a thread of its own as the clients report progress.

    A client that reports reaching a fault's operation waits until that fault has begun: clients are
    faster than faults (a node takes 20 s to come back), and without the wait every fault after the first
    would fire once the workload was over, on an idle pipeline. With it each fault lands where the plan
    puts it and the writes go on while it recovers."""

    stack: LocalStack
    agents: list[ServiceProcess]
    workers: list[ServiceProcess]
    plan: FaultPlan
    seed: int
    node_down_s: float = 8.0
    say: Callable[[str], None] = print
    started_at: float = field(default_factory=time.monotonic)
    records: list[FaultRecord] = field(default_factory=list)
    #: processes down on purpose right now (the supervisor leaves them alone)
    killed: set[str] = field(default_factory=set)
    #: how long a paused worker stays stopped: past the workers' group session timeout (15 s)
    pause_s: float = 25.0
    #: pauses between the attempts to bring a stopped service back
    restart_backoff_s: tuple[float, ...] = RESTART_BACKOFF_S
    #: why the run is invalid: a service a fault stopped did not come back (no further fault fires)
    invalid: str | None = None
    #: the longest a client waits for a due fault to begin
    hold_timeout_s: float = 300.0
    #: the proxy the workers reach Kafka through (commit_cut; None: they connect directly)
    cutter: CommitCutter | None = None
    #: how long the proxy refuses the workers' new connections after a cut
    cut_refuse_s: float = 12.0
    #: cdc_raw_full's writer of filler (None: the fault cannot fire)
    filler: CdcRawFiller | None = None
    #: how long a node stays full (rejecting the workload's CDC writes) before its agent starts
    full_hold_s: float = 5.0
    _progress: int = 0
    _begun: int = 0
    _lock: threading.Condition = field(default_factory=threading.Condition)
    _thread: threading.Thread | None = None
    _stop: bool = False

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="faults", daemon=True)
        self._thread.start()

    def progress(self, done: int) -> None:
        """``done`` operations are done; returns once every fault due by then has begun."""
        with self._lock:
            self._progress = done
            self._lock.notify_all()
            due = sum(1 for at, _kind in self.plan.schedule if at <= done)
            deadline = time.monotonic() + self.hold_timeout_s
            while self._begun < due and not self._stop and self.invalid is None:
                if time.monotonic() > deadline:
                    break
                self._lock.wait(0.5)

    def finish(self) -> None:
        """Fire what is left (the workload ended early), then wait for every recovery."""
        with self._lock:
            self._stop = True
            self._lock.notify_all()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        rng = random.Random(self.seed)
        for at, kind in self.plan.schedule:
            with self._lock:
                while self._progress < at and not self._stop:
                    self._lock.wait(0.5)
                if self.invalid is not None:
                    return
                record = FaultRecord(kind, "", at, time.monotonic() - self.started_at)
                self.records.append(record)
                self._begun += 1  # the clients waiting for this fault go on
                self._lock.notify_all()
            try:
                self._inject(kind, rng, record)
            except ServiceLost as exc:
                record.error = str(exc)
                self.invalid = str(exc)
                self.say(f"fault {kind} on {record.target} at operation {at}: {exc}; the run is invalid")
                return
            except Exception as exc:  # a fault that cannot be injected is reported, not fatal
                record.error = repr(exc)
                self.say(f"fault {kind} at operation {at} could not be injected: {exc!r}")
                continue
            record.recovered_s = time.monotonic() - self.started_at
            self.say(f"fault {kind} on {record.target} at operation {at}: recovered after "
                     f"{record.recovered_s - record.started_s:.1f} s")  # fmt: skip

    def _pause_worker(self, process: ServiceProcess, record: FaultRecord) -> None:
        """SIGSTOP a worker past its group session timeout, then SIGCONT: its partitions moved meanwhile, so
        the woken zombie must not commit (its transactional ids were taken over: it is fenced and stops, or
        finds its partitions gone). Whatever it does, the supervisor brings it back if it exits."""
        record.target = process.name
        pid = process.process.pid if process.process is not None else None
        if pid is None or not process.running:
            raise RuntimeError(f"{process.name} is not running")
        self.killed.add(process.name)
        try:
            os.kill(pid, signal.SIGSTOP)
            time.sleep(self.pause_s)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        time.sleep(5.0)  # its next commit meets the fence

        def back() -> None:
            process.start()  # a no-op while it runs
            process.wait_healthy(120)

        restart(process.name, back, self.restart_backoff_s)
        self.killed.discard(process.name)

    def _cut_commit(self, record: FaultRecord) -> None:
        """Cut the workers' connections right after the next commit request: the worker that sent it
        cannot know whether it committed; new connections are refused for ``cut_refuse_s``. The workers
        must find out and neither lose nor repeat the batch; each must be healthy again after."""
        if self.cutter is None:
            raise RuntimeError("the workers do not reach Kafka through a proxy (a secured run)")
        record.target = "workers"
        if not self.cutter.cut_after_commit(self.cut_refuse_s, wait_s=120.0):
            raise RuntimeError("no worker sent a commit within 120 s")
        record.detail = f"connections cut after an EndTxn request; new ones refused for {self.cut_refuse_s} s"
        time.sleep(self.cut_refuse_s + 3.0)
        for process in self.workers:

            def back(process: ServiceProcess = process) -> None:
                process.start()  # a no-op while it runs; the supervisor may have started it already
                process.wait_healthy(120)

            restart(process.name, back, self.restart_backoff_s)

    def _fill_cdc_raw(self, rng: random.Random, record: FaultRecord) -> None:
        """Stop a node's agent, write filler to that node until Cassandra rejects CDC writes, hold it full
        for ``full_hold_s`` while the workload goes on, start the agent and wait until the node takes CDC
        writes again (the agent read and deleted what filled cdc_raw)."""
        if self.filler is None:
            raise RuntimeError("no filler of cdc_raw for this run")
        node = rng.choice(self.stack.known_nodes())
        agent = next(a for a in self.agents if a.name == f"agent-{node.spec.name}")
        record.target = node.spec.name
        self.killed.add(agent.name)
        agent.stop()

        def back() -> None:
            agent.start()
            agent.wait_healthy(120)

        try:
            limit = node.spec.cdc_total_space_mb * 2**20 * 3 // 2
            result = self.filler.fill(node.spec.address, node.spec.log_file, limit)
            record.detail = (f"{result.bytes_written / 2**20:.0f} MiB of filler in {result.seconds:.1f} s, then "
                             f"{node.spec.name} rejected CDC writes ({result.cdc_bytes_on_disk} CDC bytes on "
                             f"disk, cdc_total_space {node.spec.cdc_total_space_mb} MiB)")  # fmt: skip
            time.sleep(self.full_hold_s)
        finally:  # a fill that failed still gives the node its agent back
            restart(agent.name, back, self.restart_backoff_s)
            self.killed.discard(agent.name)
        deadline = time.monotonic() + 300.0
        while not self.filler.accepted(node.spec.address):
            if time.monotonic() > deadline:
                raise ServiceLost(f"cdc_raw of {node.spec.name}", 1, "CDC writes still rejected 300 s after "
                                  f"{agent.name} started")  # fmt: skip
            time.sleep(1.0)

    def _inject(self, kind: str, rng: random.Random, record: FaultRecord) -> None:
        if kind in ("agent", "worker"):
            process = rng.choice(self.agents if kind == "agent" else self.workers)
            record.target = process.name
            self.killed.add(process.name)
            process.kill()
            time.sleep(2.0)

            def back() -> None:
                process.start()
                process.wait_healthy(120)

            restart(process.name, back, self.restart_backoff_s)
            self.killed.discard(process.name)
        elif kind == "broker":
            record.target = "kafka"
            self.stack.kafka.stop()
            time.sleep(2.0)
            restart(
                f"kafka ({self.stack.kafka.spec.bootstrap})", self.stack.kafka.start, self.restart_backoff_s
            )
        elif kind in ("node", "node_kill"):
            nodes = self.stack.known_nodes()[1:] or self.stack.known_nodes()
            node = rng.choice(nodes)
            record.target = node.spec.name
            if kind == "node":
                node.stop()
            else:
                node.kill()
            time.sleep(self.node_down_s)
            restart(f"cassandra {node.spec.name} ({node.spec.address})", node.start, self.restart_backoff_s)
        elif kind == "worker_pause":
            self._pause_worker(rng.choice(self.workers), record)
        elif kind == "commit_cut":
            self._cut_commit(record)
        elif kind == "cdc_raw_full":
            self._fill_cdc_raw(rng, record)
        else:
            raise ValueError(f"unknown fault kind {kind}; choose from {', '.join(KINDS)}")


@dataclass(slots=True)
class Supervisor:
    """Restarts an agent or worker that exited on its own, as systemd or Kubernetes would, and counts it:
    a process that stops itself on an error it cannot handle is by design, but the report shows it."""

    processes: list[ServiceProcess]
    injector: FaultInjector
    say: Callable[[str], None] = print
    restarts: list[dict[str, object]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="supervisor", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(2.0):
            for process in self.processes:
                if process.running or process.name in self.injector.killed:
                    continue
                code = process.process.returncode if process.process is not None else None
                self.restarts.append(
                    {"process": process.name, "exit_code": code, "log_tail": process.log_tail(8)}
                )
                self.say(f"{process.name} exited by itself (code {code}); restarting it")
                process.start()
