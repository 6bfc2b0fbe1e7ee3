"""A Spark standalone cluster on loopback: one master and a few workers, from the installed PySpark.

The PySpark wheel carries Spark's launcher (``bin/spark-class``) and every jar a master and a worker need,
so nothing is downloaded: each daemon is ``spark-class org.apache.spark.deploy.master.Master`` or
``...deploy.worker.Worker`` with its own ports, and each worker offers its own cores and memory to the
applications (the pipeline's jobs with ``pipeline.master: spark://127.0.0.1:<port>``). Executors run in
the workers' work folders under the home (their stdout and stderr are there, per application); the
daemons log to ``$CDC_HOME/logs/spark-*.log``.

Every daemon binds 127.0.0.1 only (SPARK_LOCAL_IP; the web UIs included) and the master's REST submission
server, which would accept any job from any local user on another port, is off. Each daemon is started
with a properties file of its own under the home, whose path on its command line tells its process
apart from any other Spark daemon on the machine.
"""

from __future__ import annotations

import importlib.util
import json
import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra.errors import ServiceStartError, ToolchainError
from infra.process import ManagedProcess, require_free_ports, wait_until_ready
from infra.settings import InfraSettings
from infra.toolchain import find_java

HOST = "127.0.0.1"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"

#: settings of every daemon (spark-defaults form); the REST submission server is off
_DAEMON_PROPERTIES = {
    "spark.master.rest.enabled": "false",
    # an application's folder (its copies of the jars and the project's code, executor logs) goes when
    # the application has ended, checked every 30 minutes, kept a day for its logs
    "spark.worker.cleanup.enabled": "true",
    "spark.worker.cleanup.appDataTtl": str(24 * 3600),
}


@dataclass(slots=True, frozen=True)
class SparkClusterSpec:
    root: Path
    logs: Path
    master_port: int = 7077
    master_ui_port: int = 8080
    worker_port: int = 7078
    """RPC port of worker 1; worker N takes worker_port + N - 1."""
    worker_ui_port: int = 8091
    """Web UI port of worker 1; worker N takes worker_ui_port + N - 1."""
    workers: int = 2
    worker_cores: int = 1
    worker_memory_mb: int = 1024
    daemon_heap_mb: int = 256

    @property
    def master_url(self) -> str:
        """What `pipeline.master` names to run the jobs on this cluster."""
        return f"spark://{HOST}:{self.master_port}"

    @property
    def master_ui(self) -> str:
        return f"http://{HOST}:{self.master_ui_port}"

    @property
    def master_log(self) -> Path:
        return self.logs / "spark-master.log"

    def worker_log(self, index: int) -> Path:
        return self.logs / f"spark-worker-{index}.log"

    def worker_dir(self, index: int) -> Path:
        """Where worker ``index`` runs its executors: one folder per application, with their logs."""
        return self.root / f"worker-{index}"

    def properties_file(self, daemon: str) -> Path:
        return self.root / f"{daemon}.properties"


def spark_cluster_spec(settings: InfraSettings) -> SparkClusterSpec:
    return SparkClusterSpec(
        root=settings.home / "spark",
        logs=settings.logs,
        master_port=settings.spark_master_port,
        master_ui_port=settings.spark_master_ui_port,
        worker_port=settings.spark_worker_port,
        worker_ui_port=settings.spark_worker_ui_port,
        workers=settings.spark_workers,
        worker_cores=settings.spark_worker_cores,
        worker_memory_mb=settings.spark_worker_memory_mb,
        daemon_heap_mb=settings.spark_daemon_heap_mb,
    )


def spark_home() -> Path:
    """The installed PySpark's folder: Spark's launcher (bin/spark-class) and jars.

    Found without importing PySpark (the local services run without the pipeline extra)."""
    spec = importlib.util.find_spec("pyspark")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    home = Path(locations[0]) if locations else None
    if home is None or not (home / "bin" / "spark-class").is_file() or not (home / "jars").is_dir():
        raise ToolchainError(
            "the Spark cluster runs from the installed PySpark (bin/spark-class and jars/), which is not "
            "installed: install the pipeline extra, `pip install 'cassandra-cdc[pipeline]'` (make setup does)"
        )
    return home


def master_argv(home: Path, spec: SparkClusterSpec) -> list[str]:
    return [
        str(home / "bin" / "spark-class"), MASTER_CLASS,
        "--host", HOST, "--port", str(spec.master_port), "--webui-port", str(spec.master_ui_port),
        "--properties-file", str(spec.properties_file("master")),
    ]  # fmt: skip


def worker_argv(home: Path, spec: SparkClusterSpec, index: int) -> list[str]:
    return [
        str(home / "bin" / "spark-class"), WORKER_CLASS,
        "--host", HOST, "--port", str(spec.worker_port + index - 1),
        "--webui-port", str(spec.worker_ui_port + index - 1),
        "--cores", str(spec.worker_cores), "--memory", f"{spec.worker_memory_mb}m",
        "--work-dir", str(spec.worker_dir(index)),
        "--properties-file", str(spec.properties_file(f"worker-{index}")),
        spec.master_url,
    ]  # fmt: skip


def _render_properties(values: dict[str, str]) -> str:
    return "".join(f"{key}={value}\n" for key, value in values.items())


class SparkCluster:
    """Start, check and stop the master and its workers; `status` reads the master's view of them."""

    def __init__(self, spec: SparkClusterSpec, settings: InfraSettings) -> None:
        self.spec = spec
        self.settings = settings
        self.master = ManagedProcess(
            name="spark-master",
            pid_file=spec.root / "master.pid",
            log_file=spec.master_log,
            marker=str(spec.properties_file("master")),
        )

    def worker(self, index: int) -> ManagedProcess:
        return ManagedProcess(
            name=f"spark-worker-{index}",
            pid_file=self.spec.root / f"worker-{index}.pid",
            log_file=self.spec.worker_log(index),
            marker=str(self.spec.properties_file(f"worker-{index}")),
        )

    def known_workers(self) -> list[int]:
        """Workers configured now, and any that run under this home from an earlier, larger setting."""
        indexes = set(range(1, self.spec.workers + 1))
        for pid_file in self.spec.root.glob("worker-*.pid"):
            index = pid_file.stem.removeprefix("worker-")
            if index.isdigit() and self.worker(int(index)).is_running():
                indexes.add(int(index))
        return sorted(indexes)

    def is_running(self) -> bool:
        return self.master.is_running()

    def state(self) -> dict[str, Any] | None:
        """The master's JSON view (status, workers with their state, cores and memory), None when it
        does not answer."""
        try:
            with urllib.request.urlopen(self.spec.master_ui + "/json/", timeout=2) as response:
                data: dict[str, Any] = json.load(response)
                return data
        except (urllib.error.URLError, OSError, ValueError):
            return None

    def alive_workers(self) -> set[int]:
        """RPC ports of the workers the master holds ALIVE."""
        state = self.state() or {}
        return {w["port"] for w in state.get("workers", []) if w.get("state") == "ALIVE"}

    def _env(self, home: Path) -> dict[str, str]:
        java = find_java()
        env = dict(os.environ)
        env.update(
            {
                "SPARK_HOME": str(home),
                "JAVA_HOME": str(Path(java.executable).resolve().parent.parent),
                "SPARK_LOCAL_IP": HOST,
                "SPARK_DAEMON_MEMORY": f"{self.spec.daemon_heap_mb}m",
                # no spark-env.sh or log4j2.properties of another installation
                "SPARK_CONF_DIR": str(self.spec.root / "conf"),
            }
        )
        return env

    def start(self) -> float | None:
        """Start the master, then each worker, and wait until the master holds every worker ALIVE; None
        if everything was running already."""
        spec = self.spec
        home = spark_home()
        if self.master.is_running() and all(self.worker(i).is_running() for i in range(1, spec.workers + 1)):
            self._wait_ready()
            return None
        spec.root.mkdir(parents=True, exist_ok=True)
        (spec.root / "conf").mkdir(exist_ok=True)
        env = self._env(home)
        took = 0.0
        if not self.master.is_running():
            require_free_ports("spark master", [(HOST, spec.master_port), (HOST, spec.master_ui_port)])
            spec.properties_file("master").write_text(_render_properties(_DAEMON_PROPERTIES))
            self.master.start(master_argv(home, spec), env=env, cwd=spec.root)
            took += wait_until_ready(
                self.master,
                lambda: (self.state() or {}).get("status") == "ALIVE",
                timeout_s=self.settings.start_timeout_s,
                what=f"spark master ({spec.master_url})",
            )
        for index in range(1, spec.workers + 1):
            worker = self.worker(index)
            if worker.is_running():
                continue
            port = spec.worker_port + index - 1
            require_free_ports(
                f"spark worker {index}", [(HOST, port), (HOST, spec.worker_ui_port + index - 1)]
            )
            spec.worker_dir(index).mkdir(parents=True, exist_ok=True)
            spec.properties_file(f"worker-{index}").write_text(_render_properties(_DAEMON_PROPERTIES))
            worker.start(worker_argv(home, spec, index), env=env, cwd=spec.worker_dir(index))
        took += self._wait_ready()
        return took

    def _wait_ready(self) -> float:
        """Every configured worker ALIVE in the master's view."""
        spec = self.spec
        ports = {spec.worker_port + i - 1 for i in range(1, spec.workers + 1)}
        took = 0.0
        for index in range(1, spec.workers + 1):
            took += wait_until_ready(
                self.worker(index),
                lambda: ports <= self.alive_workers(),
                timeout_s=self.settings.start_timeout_s,
                what=f"spark worker {index} (registering with {spec.master_url})",
            )
        return took

    def stop(self) -> list[str]:
        """Stop the workers (and with them their executors), then the master; names of what ran."""
        stopped = [f"spark worker {i}" for i in reversed(self.known_workers()) if self.worker(i).stop(30)]
        if self.master.stop(30):
            stopped.append("spark master")
        return stopped

    def require_running(self) -> None:
        """A clear error when the master is not running (for commands that need the cluster)."""
        if not self.master.is_running():
            raise ServiceStartError(
                f"the Spark cluster of {self.settings.home} is not running; start it with "
                "`cdc infra up --spark`"
            )
