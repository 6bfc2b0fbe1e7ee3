"""`cdc`: one command line for every process of the system and for the local services."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from agents.commitlog.errors import CommitLogError
from agents.errors import AgentError
from app.errors import WorkerError
from cassandra_model.errors import ModelError
from infra.errors import InfraError
from pipeline.errors import PipelineError
from runtime.logs import configure_logging

#: The top-level modules of the pipeline extra (pyspark, delta-spark and py4j, which pyspark brings).
SPARK_MODULES = ("pyspark", "delta", "py4j")
PIPELINE_INSTALL = "pip install 'cassandra-cdc[pipeline]'"


def _env_port(name: str, default: int) -> int:
    """A port from the environment variable ``name`` (checked when the command runs), else ``default``."""
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    if not value.isdigit():
        raise ValueError(f"environment variable {name}={value!r} must be a TCP port number")
    return int(value)


def _infra_settings(args: argparse.Namespace):
    from infra.settings import InfraSettings

    return InfraSettings.from_env(
        commitlog_sync_period_ms=getattr(args, "commitlog_sync_period_ms", None),
        start_timeout_s=getattr(args, "timeout", None),
        secure=True if getattr(args, "secure", False) else None,
        registry=True if getattr(args, "registry", False) else None,
        spark=True if getattr(args, "spark", False) else None,
    )


def _cmd_infra_fetch(args: argparse.Namespace) -> int:
    from infra.artifacts import (
        ensure_apicurio_converter,
        ensure_cassandra,
        ensure_connect,
        ensure_jdbc_sink,
        ensure_kafka,
        ensure_registry,
        ensure_spark_connectors,
    )
    from infra.toolchain import find_java, find_maven

    settings = _infra_settings(args)
    java = find_java()
    print(f"java {java.version} at {java.executable}; maven at {find_maven()}")
    print(f"cassandra {settings.cassandra_version} jars: {ensure_cassandra(settings)}")
    print(f"kafka {settings.kafka_version} jars: {ensure_kafka(settings)}")
    print(
        f"spark {settings.spark_version} kafka connector and delta {settings.delta_version} jars: "
        f"{ensure_spark_connectors(settings)}"
    )
    if not args.no_registry:
        print(f"apicurio registry {settings.registry_version}: {ensure_registry(settings)}")
    if not args.no_connect:
        print(f"kafka connect {settings.kafka_version} jars: {ensure_connect(settings)}")
        print(f"debezium jdbc sink {settings.jdbc_sink_version} plugin: {ensure_jdbc_sink(settings)}")
        print(
            f"apicurio connect converter {settings.registry_version} plugin: "
            f"{ensure_apicurio_converter(settings)}"
        )
    return 0


def _cmd_infra_up(args: argparse.Namespace) -> int:
    from infra.stack import LocalStack, format_status

    stack = LocalStack(_infra_settings(args))
    stack.up(
        nodes=args.nodes,
        kafka=not args.no_kafka,
        cassandra=not args.no_cassandra,
        registry=args.registry or None,
        spark=args.spark or None,
    )
    print(format_status(stack.status()))
    return 0


def _cmd_infra_down(args: argparse.Namespace) -> int:
    from infra.stack import LocalStack

    LocalStack(_infra_settings(args)).down()
    return 0


def _cmd_infra_status(args: argparse.Namespace) -> int:
    from infra.stack import LocalStack, format_status

    rows = LocalStack(_infra_settings(args)).status()
    print(format_status(rows, as_json=args.json))
    return 0


def _cmd_segment_dump(args: argparse.Namespace) -> int:
    from cdc.segment_dump import dump, expand_targets, load_catalog

    catalog = load_catalog(args.schema_cql, args.host, args.port, config_file=args.config)
    return dump(expand_targets(args.paths), catalog, start=args.start, stop=args.stop)


def _cmd_agent(args: argparse.Namespace) -> int:
    from agents.node_agent import run_agent
    from runtime.config import load_config

    config = load_config(args.config)
    configure_logging(verbose=args.verbose, json_lines=args.log_format == "json")
    return run_agent(config)


def _cmd_worker(args: argparse.Namespace) -> int:
    from app.worker import run_worker
    from runtime.config import load_config

    config = load_config(args.config)
    configure_logging(verbose=args.verbose, json_lines=args.log_format == "json")
    return run_worker(config)


def _require_pipeline_extra(job: str) -> None:
    """Some jobs import Spark only once they run: look for it first, so its absence is one clear line."""
    import importlib.util

    for module in SPARK_MODULES:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise PipelineError(
                f"`cdc pipeline {job}` needs Spark ({module} is not installed); "
                f"install the pipeline extra: {PIPELINE_INSTALL}"
            )


def _cmd_pipeline(args: argparse.Namespace) -> int:
    """`cdc pipeline JOB`: each job module has `run(config, args) -> exit code`. The jobs import Spark,
    which only the pipeline extra installs: they are imported here, never by the rest of the command line."""
    import importlib

    from runtime.config import ConfigError, load_config
    from runtime.spark_kafka import check_spark_client_key

    _require_pipeline_extra(args.job)
    job = importlib.import_module(f"pipeline.{args.job}_job")
    config = load_config(args.config)
    if config.pipeline is None:
        raise ConfigError(
            f"{config.source} has no pipeline section; `cdc pipeline` needs at least pipeline.lake_directory"
        )
    check_spark_client_key(config.kafka)  # before Spark starts: its Java client cannot read every key
    configure_logging(verbose=args.verbose, json_lines=args.log_format == "json")
    return job.run(config, args)


def _cmd_verify(args: argparse.Namespace) -> int:
    import tempfile

    from cdc.verify.faults import KINDS
    from cdc.verify.runner import VerifyOptions, VerifyRun

    faults = list(KINDS) if args.faults == "all" else [f for f in args.faults.split(",") if f]
    unknown = sorted(set(faults) - set(KINDS))
    if unknown:
        raise ValueError(
            f"--faults: unknown kind {', '.join(unknown)}; choose from {', '.join(KINDS)} or all"
        )
    if args.summarize:
        if args.report is None:
            raise ValueError("--summarize: give --report FILE, where the summary goes")
        return _verify_summary(args.summarize, args.report)
    operations, fault_count = args.operations, args.fault_count
    if args.soak:
        operations = args.operations if args.operations != 2000 else 200_000
        fault_count = fault_count or 20
        faults = faults or list(KINDS)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="cdc-verify-"))
    report_path = args.report or workdir / ("summary.json" if args.campaign else "report.json")
    options = VerifyOptions(
        workdir=workdir,
        seed=args.seed,
        operations=operations,
        clients=args.clients,
        workers=args.workers,
        faults=faults,
        fault_count=fault_count,
        report_path=report_path,
    )
    if args.campaign is not None:
        return _verify_campaign(args, options)
    report = VerifyRun(_infra_settings(args), options).run()
    summary = {k: report.get(k) for k in ("verdict", "reason", "failures", "lost", "phantom", "wrong_values",
                                          "duplicate_or_spurious_events", "explained_images", "unexplained_images",
                                          "duplicate_events", "noop_events", "dead_letters", "ttl_compared",
                                          "ttl_wrong", "events_per_operation", "latency_ms", "seed")
               if k in report}  # fmt: skip
    print(json.dumps(summary, indent=2))
    print(f"report: {report_path}; logs of agents and workers: {workdir}")
    if report["verdict"] == "invalid run":
        print(f"invalid run: {report['reason']}", file=sys.stderr)
        return 2
    return 0 if report["ok"] else 1


def _verify_campaign(args: argparse.Namespace, options: object) -> int:
    """`cdc verify --campaign N`: exit 0 when every run is clean, 1 when one failed, 2 when none failed but
    one could not be judged (invalid or an error)."""
    from cdc.verify.campaign import run_campaign
    from cdc.verify.runner import VerifyOptions

    assert isinstance(options, VerifyOptions) and options.report_path is not None
    summary = run_campaign(_infra_settings(args), options, args.campaign, summary_path=options.report_path)
    print(json.dumps({k: v for k, v in summary.items() if k != "per_run"}, indent=2))
    print(f"summary: {options.report_path}; one report per run in {options.workdir / 'reports'}")
    if summary["clean"]:
        return 0
    return 1 if summary["verdicts"].get("failed") else 2


def _verify_summary(folders: list[Path], report_path: Path) -> int:
    """`cdc verify --summarize DIR...`: one summary of the campaigns run in DIR... (say, one half of the
    seeds on each of two sets of services); exit codes as for a campaign."""
    from cdc.verify.campaign import summarize_folders

    summary = summarize_folders(folders)
    report_path.parent.mkdir(parents=True, exist_ok=True)
    report_path.write_text(json.dumps(summary, indent=2, default=str) + "\n")
    print(json.dumps({k: v for k, v in summary.items() if k != "per_run"}, indent=2))
    print(f"summary: {report_path}")
    if summary["clean"]:
        return 0
    return 1 if summary["verdicts"].get("failed") else 2


def _cmd_demo(args: argparse.Namespace) -> int:
    from cdc.demo.command import run_demo

    return run_demo(
        _infra_settings(args),
        rows=args.rows,
        rounds=args.rounds,
        keep_running=args.keep_running,
        agent_port=args.agent_port or _env_port("CDC_DEMO_AGENT_PORT", 9465),
        worker_port=args.worker_port or _env_port("CDC_DEMO_WORKER_PORT", 6067),
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cdc", description="Change data capture for Apache Cassandra.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG level")
    commands = parser.add_subparsers(dest="command", required=True)

    infra = commands.add_parser("infra", help="local Cassandra (CDC on) and Kafka, from Maven Central jars")
    infra_cmds = infra.add_subparsers(dest="infra_command", required=True)
    fetch = infra_cmds.add_parser("fetch", help="check Java and Maven, download the jars (once, cached)")
    fetch.add_argument("--no-registry", action="store_true", help="skip the schema registry (142 MB)")
    fetch.add_argument(
        "--no-connect",
        action="store_true",
        help="skip Kafka Connect, the Debezium JDBC sink and the registry's converter (about 90 MB)",
    )
    fetch.set_defaults(func=_cmd_infra_fetch)
    up = infra_cmds.add_parser("up", help="start Kafka and Cassandra if not running; wait until they answer")
    up.add_argument("--nodes", type=int, default=1, help="Cassandra nodes on 127.0.0.1..N (1-3, default 1)")
    up.add_argument("--no-kafka", action="store_true", help="start Cassandra only")
    up.add_argument("--no-cassandra", action="store_true", help="start Kafka only")
    up.add_argument(
        "--registry",
        action="store_true",
        help="also start the schema registry (Apicurio, Confluent API at /apis/ccompat/v7; CDC_REGISTRY=1)",
    )
    up.add_argument(
        "--spark",
        action="store_true",
        help="also start a Spark standalone cluster from the installed PySpark: a master and "
        "CDC_SPARK_WORKERS workers (default 2) on loopback; jobs run there with pipeline.master "
        "spark://127.0.0.1:<CDC_SPARK_MASTER_PORT> (CDC_SPARK=1)",
    )
    up.add_argument(
        "--commitlog-sync-period-ms",
        type=int,
        help="periodic commit-log sync period (default 100; CDC latency)",
    )
    up.add_argument("--timeout", type=int, help="seconds each service may take to become ready (default 240)")
    up.add_argument(
        "--secure",
        action="store_true",
        help="Kafka on SASL_SSL (SCRAM, PLAIN) and Cassandra with passwords and TLS; CA and credential "
        "files under $CDC_HOME/tls and $CDC_HOME/secure (also CDC_SECURE=1)",
    )
    up.set_defaults(func=_cmd_infra_up)
    down = infra_cmds.add_parser("down", help="stop every local service")
    down.set_defaults(func=_cmd_infra_down)
    status = infra_cmds.add_parser("status", help="what runs: pids, ports, data and log paths")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.set_defaults(func=_cmd_infra_status)

    segment = commands.add_parser("segment", help="inspect commit-log segments")
    segment_cmds = segment.add_subparsers(dest="segment_command", required=True)
    seg_dump = segment_cmds.add_parser(
        "dump",
        help="one JSON object per partition update (stdout); damage and errors as JSON lines (stderr)",
        description="Decode commit-log segments. A folder is read as a cdc_raw folder; a file is read up to "
        "the offset of the _cdc.idx beside it, or whole when it has none.",
    )
    seg_dump.add_argument(
        "paths", nargs="+", type=Path, metavar="PATH", help="segment files or cdc_raw folders"
    )
    source = seg_dump.add_mutually_exclusive_group()
    source.add_argument(
        "--schema-cql", type=Path, metavar="FILE", help="CQL DDL whose tables carry WITH ID = <uuid>"
    )
    source.add_argument("--host", help="read the schema from this node's system_schema")
    seg_dump.add_argument("--port", type=int, help="CQL port of the node (default: the config's, else 9042)")
    seg_dump.add_argument("--config", type=Path, metavar="FILE",
                          help="YAML config like the agent's: its cassandra section (contact point, port, "
                          "username, password, tls) reaches the node; --host/--port override the address")  # fmt: skip
    seg_dump.add_argument("--from", dest="start", type=int, default=0, metavar="POS",
                          help="logical position to start at (one returned before as a resume position)")  # fmt: skip
    seg_dump.add_argument("--to", dest="stop", type=int, metavar="POS", help="read no entry ending past POS")
    seg_dump.set_defaults(func=_cmd_segment_dump)

    agent = commands.add_parser(
        "agent", help="run the node agent: cdc_raw segments to the raw Kafka topic (one per Cassandra node)"
    )
    agent.add_argument(
        "--config", type=Path, required=True, metavar="FILE", help="YAML config (CDC__* env overrides)"
    )
    agent.add_argument(
        "--log-format", choices=("json", "text"), default="json", help="log lines (default json)"
    )
    agent.set_defaults(func=_cmd_agent)

    worker = commands.add_parser(
        "worker",
        help="run a worker: raw events to row state (RocksDB) and one clean topic per table, with REST",
    )
    worker.add_argument(
        "--config", type=Path, required=True, metavar="FILE", help="YAML config (CDC__* env overrides)"
    )
    worker.add_argument(
        "--log-format", choices=("json", "text"), default="json", help="log lines (default json)"
    )
    worker.set_defaults(func=_cmd_worker)

    verify = commands.add_parser(
        "verify",
        help="randomized workload on the 3-node cluster (RF=3) with agents, workers and faults; "
        "Cassandra's SELECT at ALL as the oracle",
    )
    verify.add_argument("--seed", type=int, default=1, help="workload seed (default 1)")
    verify.add_argument("--operations", type=int, default=2000, help="CQL operations (default 2000)")
    verify.add_argument("--clients", type=int, default=4, help="concurrent clients (default 4)")
    verify.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    verify.add_argument(
        "--faults",
        default="",
        help="comma list of agent, worker, broker, node, worker_pause, node_kill, commit_cut, "
        "cdc_raw_full, or all (default none)",
    )
    verify.add_argument("--fault-count", type=int, help="faults in all (default one per kind)")
    verify.add_argument(
        "--soak", action="store_true", help="long run: 200k operations, 20 faults of every kind"
    )
    verify.add_argument(
        "--campaign",
        type=int,
        metavar="N",
        help="N runs with seeds seed..seed+N-1, one fault of each kind per run unless --faults/--fault-count "
        "say otherwise; a JSON report per run and a summary",
    )
    verify.add_argument(
        "--report",
        type=Path,
        help="JSON report path (default <workdir>/report.json; with --campaign the summary, <workdir>/summary.json)",
    )
    verify.add_argument("--workdir", type=Path, help="configs and logs of the agents and workers")
    verify.add_argument(
        "--summarize",
        type=Path,
        nargs="+",
        metavar="DIR",
        help="run nothing: one summary (to --report) of the campaigns whose workdirs are DIR...",
    )
    verify.set_defaults(func=_cmd_verify)

    demo = commands.add_parser(
        "demo", help="local services, agent, worker and REST; a small workload and its change events, live"
    )
    demo.add_argument("--rows", type=int, default=6, help="rows inserted per round (default 6)")
    demo.add_argument("--rounds", type=int, default=4, help="rounds of writes (default 4)")
    demo.add_argument(
        "--keep-running",
        action="store_true",
        help="keep agent and worker running and show further events until Ctrl-C",
    )
    demo.add_argument(
        "--agent-port",
        type=int,
        default=None,
        help="health and metrics of node N's agent on this + N - 1 (default 9465, or CDC_DEMO_AGENT_PORT)",
    )
    demo.add_argument(
        "--worker-port",
        type=int,
        default=None,
        help="the worker's REST, health and metrics (default 6067, or CDC_DEMO_WORKER_PORT)",
    )
    demo.set_defaults(func=_cmd_demo)

    pipeline = commands.add_parser(
        "pipeline", help="Spark jobs (the pipeline extra): lake tables, bootstrap, replay, reconcile"
    )
    jobs = pipeline.add_subparsers(dest="job", required=True, metavar="JOB")
    job_help = {
        "lake": "stream the clean topics into one Delta table per CDC table (MERGE per micro-batch)",
        "bootstrap": "read the rows that existed before CDC from Cassandra and feed them to the workers",
        "replay": "rebuild row images from the raw topic in batch with the workers' merge code",
        "reconcile": "compare a lake table (or replayed images) with Cassandra, key by key",
    }
    for name, text in job_help.items():
        job = jobs.add_parser(name, help=text, description=text)
        job.add_argument("--config", type=Path, required=True, help="YAML file with a pipeline section")
        job.add_argument(
            "--tables", default="", help="comma list of keyspace.table to work on (default: every CDC table)"
        )
        job.add_argument("--log-format", choices=["text", "json"], default="text")
        job.set_defaults(func=_cmd_pipeline)
        if name == "lake":
            job.add_argument(
                "--once", action="store_true", help="take everything waiting, then stop (no streaming)"
            )
        if name == "replay":
            job.add_argument(
                "--output", type=Path, help="write the replayed images as Delta tables under this folder"
            )
            job.add_argument(
                "--compare", action="store_true", help="check the images against the clean topics"
            )
        if name == "reconcile":
            job.add_argument(
                "--against",
                default="lake",
                help="what to compare with Cassandra: lake (default) or a replay output folder",
            )
            job.add_argument("--report", type=Path, help="write the differences as JSON here")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(verbose=args.verbose)
    try:
        return args.func(args)
    except (
        InfraError,
        CommitLogError,
        ModelError,
        AgentError,
        WorkerError,
        PipelineError,
        ValueError,
    ) as exc:
        print(f"cdc: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # output piped into `head` and closed early
        return 0


if __name__ == "__main__":
    sys.exit(main())
