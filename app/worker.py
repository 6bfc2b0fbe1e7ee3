"""The worker: a Faust application that merges the raw topic into row state and clean topics.

Faust runs the service: its lifecycle and signals, the timer for expiries, and the web server that
routes a REST request to the worker owning the key's partition. The raw topic is read by the worker's
own group-managed consumer in whole batches (see raw_consumer: Faust's per-event stream path cost half
of a worker's CPU), merged by one task, so at concurrency 1, and each raw partition's share of a batch is
committed in one Kafka transaction with its state changelog, clean events and offset, under the
partition's own transactional id (see batch_loop and partition_producers). Faust's own Kafka consumer
and producer are not started: nothing of the worker goes through them.

Every Kafka client of the worker (raw consumer, transactional producers, owners, changelog restore, schema
topic, group offsets, admin) and Faust's broker settings come from runtime.kafka_clients, so `kafka.security` reaches all
of them; a Kafka that refuses the worker ends it with the setting to fix (see ``prepare``).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import socket
import ssl
import time
from collections.abc import Awaitable, Callable

import faust
from aiokafka.errors import KafkaError, SaslAuthenticationFailed, UnsupportedSaslMechanismError
from faust.app.base import BootStrategy
from rocksdict import Cache, WriteBufferManager

from app.batch_loop import BatchLoop, Topics
from app.change_processor import ChangeProcessor
from app.errors import TransactionFailed, WorkerError
from app.group_offsets import GroupOffsets
from app.heartbeat import make_heartbeat
from app.kafka_status import KafkaStatus
from app.owner_directory import OwnerDirectory
from app.partition_producers import PartitionProducers
from app.partition_states import PartitionStates, changelog_topic
from app.raw_consumer import RawConsumer
from app.rest_api import register_views
from app.standby_stores import StandbyStores
from app.transactional_sink import TransactionalSink
from app.worker_core import AVAILABLE, change_json, table_merge, use_row_codec
from app.worker_health import worker_health
from app.worker_stats import WorkerStats
from runtime.config import CdcConfig, ConfigError, KafkaConfig, WorkerConfig
from runtime.core_choice import choose_core, core_description
from runtime.kafka_clients import KafkaAccessError, explain_kafka_error, faust_broker
from runtime.kafka_probe import PROBE_EVERY_S, KafkaProbe
from runtime.kafka_topics import TopicSpec, ensure_topics
from runtime.tls import ClientSetupError, KeyPasswordRefused
from schemas.change_codec import ChangeCodec
from schemas.change_connect_json import ConnectJsonChangeCodec
from schemas.change_json import JsonChangeCodec
from schemas.schema_topic import TableSchemas
from state.store.partition_store import StoreOptions

log = logging.getLogger(__name__)


def worker_config(config: CdcConfig) -> WorkerConfig:
    if config.worker is None:
        raise ConfigError(f"config {config.source} has no worker section (worker.data_directory is required)")
    return config.worker


def make_codec(worker: WorkerConfig, core: str = "python") -> ChangeCodec:
    """The clean topics' codec; ``core`` native: JSON change events written by the native core."""
    if worker.encoding == "avro":
        from schemas.change_avro import AvroChangeCodec
        from schemas.registry_client import HttpSchemaRegistryClient

        assert worker.schema_registry_url is not None  # checked with the config
        level = worker.schema_compatibility
        registry = HttpSchemaRegistryClient(
            worker.schema_registry_url, compatibility=None if level == "registry" else level
        )
        return AvroChangeCodec(registry, worker.clean_topic_prefix, decimal_handling=worker.decimal_handling)
    if worker.encoding == "json_schema":
        return ConnectJsonChangeCodec(worker.clean_topic_prefix, decimal_handling=worker.decimal_handling)
    return JsonChangeCodec.for_decimals(worker.decimal_handling, native=change_json(core))


class _WorkerBoot(BootStrategy):
    """Faust's services without its Kafka consumer and producer (the worker brings its own)."""

    enable_kafka_consumer = False
    enable_kafka_producer = False


class _WorkerApp(faust.App):
    BootStrategy = _WorkerBoot


class Worker:
    """Everything one worker process runs; ``app`` is the Faust application."""

    def __init__(self, config: CdcConfig) -> None:
        self.config = config
        self.settings = settings = worker_config(config)
        kafka = config.kafka
        self.stats = WorkerStats()
        #: where the worker is in its life: starting, ok (running), failed; `/health` adds degraded
        self.status = "starting"
        self.kafka_status = KafkaStatus(kafka.bootstrap_servers, settings.outage_timeout_s)
        self.probe = KafkaProbe(kafka)
        self.core = choose_core(
            settings.core, installed=AVAILABLE == "native", key="worker.core", source=config.source
        )
        self.stats.native_core.set(1 if self.core == "native" else 0)
        use_row_codec(self.core)
        self.topics = Topics(
            raw=kafka.raw_topic,
            changelog=changelog_topic(settings.app_id),
            dead_letter=f"{settings.app_id}.dead-letter",
            group_id=settings.app_id,
            clean_partitions=settings.clean_partitions,
            replication_factor=kafka.replication_factor,
        )
        self.schemas = TableSchemas(kafka, kafka.schema_topic)
        self.partitions = PartitionStates(
            settings.data_directory,
            kafka,
            self.topics.changelog,
            StoreOptions(
                write_buffer_bytes=settings.write_buffer_size,
                cache=Cache(settings.block_cache_size),
                write_buffer_manager=WriteBufferManager(settings.memtable_budget, False),
                tombstone_floor_s=settings.tombstone_floor,
            ),
            self.stats,
        )
        self.standby = (
            StandbyStores(self.partitions, kafka.raw_partitions, self.stats)
            if settings.standby_replicas
            else None
        )
        self.processor = ChangeProcessor(
            cluster=config.cluster,
            topic_prefix=settings.clean_topic_prefix,
            codec=make_codec(settings, self.core),
            stats=self.stats,
            refuse_counters=settings.counter_tables == "refuse",
            table_merge=table_merge(self.core),
        )
        self.producers = PartitionProducers(
            kafka, settings.app_id, transaction_timeout_ms=settings.transaction_timeout_ms
        )
        self.group_offsets = GroupOffsets(kafka, settings.app_id, kafka.raw_topic)
        heartbeat = make_heartbeat(settings)
        # heartbeats carry no state: a producer of the worker's own, not one of a raw partition
        self.heartbeat_sink = (
            None
            if heartbeat is None
            else TransactionalSink(
                kafka,
                f"{settings.app_id}-heartbeat-{settings.worker_id}",
                transaction_timeout_ms=settings.transaction_timeout_ms,
            )
        )
        self.web_host = (
            settings.web_bind if settings.web_bind not in ("0.0.0.0", "::") else socket.gethostname()
        )
        self.url = f"http://{self.web_host}:{settings.web_port}"
        self.owners = OwnerDirectory(kafka, f"{settings.app_id}.owners", self.url, settings.worker_id)
        self.consumer = RawConsumer(
            kafka=kafka,
            topic=kafka.raw_topic,
            group_id=settings.app_id,
            batch_max_events=settings.batch_max_events,
            batch_max_wait_ms=settings.batch_max_wait_ms,
            session_timeout_ms=settings.session_timeout_ms,
            on_assigned=self._on_assigned,
            on_revoked=self._on_revoked,
        )
        self.loop = BatchLoop(
            kafka=kafka,
            topics=self.topics,
            partitions=self.partitions,
            schemas=self.schemas,
            processor=self.processor,
            producers=self.producers,
            group_offsets=self.group_offsets,
            stats=self.stats,
            digest_horizon_s=settings.digest_horizon_s,
            heartbeat=heartbeat,
            heartbeat_sink=self.heartbeat_sink,
            reposition=self.consumer.seek,
            kafka_status=self.kafka_status,
            outage_timeout_s=settings.outage_timeout_s,
            core=self.core,
        )
        self.stats.lag.watch(self.consumer.highwater, self.consumer.fetched_at)
        self._restoring: asyncio.Task[None] | None = None
        self._merging: asyncio.Task[object] | None = None
        self._beating: asyncio.Task[object] | None = None
        self._watching: asyncio.Task[object] | None = None
        self._standing: asyncio.Task[object] | None = None
        self.app = self._build_app()

    def _build_app(self) -> faust.App:
        settings = self.settings
        # Faust's own consumer and producer are off (see _WorkerBoot), but should anything of Faust make
        # a Kafka client, it has the config's TLS and SASL too
        broker = faust_broker(self.config.kafka)
        app = _WorkerApp(
            settings.app_id,
            broker=broker.urls,
            broker_credentials=broker.credentials,
            store="memory://",
            autodiscover=False,
            datadir=str(settings.data_directory / "faust"),
            web_enabled=True,
            web_bind=settings.web_bind,
            web_port=settings.web_port,
            web_host=self.web_host,
            canonical_url=self.url,
            web_tables_enabled=False,
        )

        @app.task
        async def merge_raw_events() -> None:
            self._merging = asyncio.current_task()
            try:
                await self.consumer.start()
                _settle_garbage_collector()
                self.status = "ok"
                async for batch in self.consumer.batches():
                    await self.loop.process(batch.records, lambda batch=batch: self.consumer.current(batch))
            except asyncio.CancelledError:
                raise  # Faust stops the task (shutdown): an uncommitted batch is merged again later
            except BaseException as exc:
                await self._fail(exc)
                raise
            finally:
                await self.consumer.stop()

        @app.task
        async def keep_standby_copies() -> None:
            if self.standby is None:
                return
            self._standing = asyncio.current_task()
            try:
                await self.standby.run()
            finally:
                self.standby.close()

        @app.timer(interval=settings.expiry_interval_ms / 1000)
        async def expire_ttls() -> None:
            if self.status == "ok":
                await self._periodic_commit(self.loop.expire, "expiry")

        @app.task
        async def watch_kafka() -> None:
            self._watching = asyncio.current_task()
            await self._watch_kafka()

        if self.loop.heartbeat is not None:

            @app.task
            async def send_heartbeats() -> None:
                self._beating = asyncio.current_task()
                await self._beat_forever()

        @app.on_before_shutdown.connect
        async def on_shutdown(sender: faust.App, **_: object) -> None:
            await self.stop()

        register_views(app, self)
        return app

    async def _beat_forever(self) -> None:
        """Heartbeats while the worker runs (after a batch's commits when one is due then; see batch_loop).
        A heartbeat that cannot commit is tried again at the next one (none while Kafka does not answer);
        fenced, the worker stops."""
        while True:
            await asyncio.sleep(max(self.loop.heartbeat_wait_s(), 0.05))
            ready = self.status == "ok" and self.kafka_status.reachable
            if not ready or not await self._periodic_commit(self.loop.beat, "heartbeat"):
                await asyncio.sleep(self.settings.heartbeat_interval_ms / 1000)

    async def _watch_kafka(self) -> None:
        """Whether Kafka answers, every PROBE_EVERY_S, for `/health`, the lag figures and the logs."""
        bootstrap = self.config.kafka.bootstrap_servers
        while True:
            error = await self.probe.look()
            now, now_ms = time.monotonic(), int(time.time() * 1000)
            if error is None:
                self.kafka_status.answered(now)
                self.stats.lag.blind(None, now_ms)
            else:
                self.kafka_status.did_not_answer(error, now)
                self.stats.lag.blind(f"Kafka at {bootstrap} does not answer", now_ms)
            await asyncio.sleep(PROBE_EVERY_S)

    async def _periodic_commit(self, step: Callable[[], Awaitable[object]], what: str) -> bool:
        """One commit of a timer (expiry, heartbeat). Kafka being away is left to the next tick (False;
        app/kafka_status.py tells the outage in the log); a fence, or any other error, stops the worker."""
        try:
            await step()
        except asyncio.CancelledError:
            raise
        except (TransactionFailed, KafkaError, OSError) as exc:
            if getattr(exc, "fatal", False):
                await self._fail(exc)
                raise
            self.kafka_status.commit_failed(what, exc, time.monotonic())
            return False
        except BaseException as exc:
            await self._fail(exc)
            raise
        return True

    async def _on_assigned(self, partitions: set[int]) -> None:
        if self.standby is not None:
            self.standby.own(partitions)  # their copies closed before the takeover opens them
        self.partitions.assign(partitions)
        self.stats.lag.assign(partitions)
        await self.owners.announce(partitions)
        log.info("assigned raw partitions %s", sorted(partitions))
        # restore now, not at the first event: a quiet partition must still answer REST and expire TTLs
        self._restoring = asyncio.get_running_loop().create_task(self._restore_assigned(partitions))

    async def _on_revoked(self, partitions: set[int]) -> None:
        await self.loop.release(partitions)  # a batch in flight commits first
        if self.standby is not None:
            self.standby.disown(partitions)  # their stores are closed: copied from now on
        self.stats.lag.revoke(partitions)
        log.info("revoked raw partitions %s", sorted(partitions))

    async def _restore_assigned(self, partitions: set[int]) -> None:
        """Take the assigned partitions over (register their transactional ids, restore their stores),
        waiting out a Kafka outage for as long as a batch would (worker.outage_timeout_s, from the first
        failure); then read where the group resumes the new ones, for the lag metric."""
        first_failure: float | None = None
        while True:
            try:
                await self.loop.restore_assigned()
                await self._count_lag_from(partitions)
                return
            except asyncio.CancelledError:
                raise
            except (KafkaError, OSError) as exc:
                now = time.monotonic()
                first_failure = now if first_failure is None else first_failure
                self.kafka_status.commit_failed("taking raw partitions over", exc, now)
                if now - first_failure >= self.loop.retry_for_s:
                    await self._fail(exc)
                    return
                await asyncio.sleep(2.0)
            except BaseException as exc:
                await self._fail(exc)
                return

    async def _count_lag_from(self, partitions: set[int]) -> None:
        """The group's committed offsets of newly assigned partitions: records behind are counted from
        there until this worker commits them. Never fatal (a metric is not worth stopping the worker for):
        their lag stays unknown until then."""
        timeout_s = max(10.0, self.config.kafka.request_timeout_ms / 1000 * 2)
        try:
            offsets = await asyncio.wait_for(self.consumer.committed_offsets(partitions), timeout_s)
            self.stats.lag.start_at(offsets)
        except Exception as exc:  # Kafka away, or the partitions revoked meanwhile
            log.warning(
                "cannot read the committed offsets of raw partitions %s (%r): their lag is unknown until "
                "this worker commits them",
                sorted(partitions),
                exc,
            )

    async def _fail(self, exc: BaseException) -> None:
        self.status = "failed"
        self.loop.failed = exc
        log.critical("worker stops: %s", exc, exc_info=exc)
        await self.app.crash(exc)

    async def prepare(self) -> None:
        """Before Faust starts: topics exist, schemas are read, the heartbeat producer (if any) is
        registered. The raw partitions' producers register when the partitions are assigned: that fences
        their previous owner and finishes the transactions it left open.

        A Kafka that does not answer is waited for up to worker.startup_timeout_s. One that refuses the
        worker (credentials, certificates, TLS on one side only, an unreadable key file) does not change
        its mind: that ends the start at once, with the kafka.security key to fix. Nothing is consumed
        before this succeeds, so nothing is lost."""
        deadline = time.monotonic() + self.settings.startup_timeout_s
        while True:
            try:
                await self._prepare()
                return
            except ClientSetupError as exc:  # a kafka.security file or key: the config must change
                await self.shutdown()
                raise WorkerError(client_setup_failure(exc)) from None
            except (KafkaError, OSError) as exc:
                refusal = kafka_refusal(exc, self.config.kafka)
                if refusal is not None:
                    await self.shutdown()
                    raise WorkerError(f"Kafka refused the worker: {refusal}") from exc
                if time.monotonic() >= deadline:
                    raise WorkerError(
                        f"cannot prepare the worker on Kafka at {self.config.kafka.bootstrap_servers} "
                        f"(config key kafka.bootstrap_servers) within worker.startup_timeout_s: {exc!r}"
                    ) from exc
                log.warning(
                    "Kafka at %s does not answer yet (%r); retrying", self.config.kafka.bootstrap_servers, exc
                )
                await self.shutdown()
                await asyncio.sleep(2.0)

    async def _prepare(self) -> None:
        kafka = self.config.kafka
        log.info(
            "per-record core: %s",
            core_description(self.core, installed=AVAILABLE == "native", key="worker.core"),
        )
        try:
            (self.settings.data_directory / "faust").mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(
                f"config key worker.data_directory: cannot create {self.settings.data_directory}: {exc.strerror}"
            ) from exc
        counts = await ensure_topics(
            kafka,
            [
                TopicSpec(kafka.raw_topic, kafka.raw_partitions, kafka.replication_factor),
                TopicSpec(kafka.schema_topic, 1, kafka.replication_factor, {"cleanup.policy": "compact"}),
                TopicSpec(
                    self.topics.changelog,
                    kafka.raw_partitions,
                    kafka.replication_factor,
                    {"cleanup.policy": "compact"},
                ),
                TopicSpec(self.topics.dead_letter, 1, kafka.replication_factor),
                TopicSpec(
                    f"{self.settings.app_id}.owners",
                    1,
                    kafka.replication_factor,
                    {"cleanup.policy": "compact"},
                ),
                *(
                    []
                    if (beat := self.loop.heartbeat) is None
                    else [beat.topic_spec(kafka.replication_factor)]
                ),
            ],
        )
        if counts.get(kafka.raw_topic) != kafka.raw_partitions:
            raise ConfigError(
                f"config key kafka.raw_partitions is {kafka.raw_partitions} but raw topic {kafka.raw_topic} has "
                f"{counts.get(kafka.raw_topic)} partitions; set it to the topic's count"
            )
        if counts.get(self.topics.changelog) != counts.get(kafka.raw_topic):
            raise ConfigError(
                f"changelog topic {self.topics.changelog} has {counts.get(self.topics.changelog)} partitions but "
                f"raw topic {kafka.raw_topic} has {counts.get(kafka.raw_topic)}: they must match (partition p of "
                "the changelog holds the state of raw partition p)"
            )
        await self.schemas.start()
        if self.heartbeat_sink is not None:
            await self.heartbeat_sink.start()
        await self.owners.start()

    def health(self) -> tuple[int, dict[str, object]]:
        """`/health`: HTTP status and body (app/worker_health.py)."""
        return worker_health(
            lifecycle=self.status,
            worker_id=self.settings.worker_id,
            assigned=self.partitions.assigned,
            ready=set(self.partitions.ready),
            tables_known=len(self.schemas.tables()),
            core=self.core,
            kafka=self.kafka_status,
            lag=self.stats.lag.figures(int(time.time() * 1000)),
            failed=self.loop.failed,
            now=time.monotonic(),
        )

    async def stop(self) -> None:
        """Stop merging (a commit under way ends first, and the raw consumer leaves the group), then close
        every client and store, while Faust still runs the event loop."""
        for task in (self._watching, self._beating, self._merging, self._restoring, self._standing):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        await self.shutdown()

    async def shutdown(self) -> None:
        """Close every client (each within a deadline: Kafka may be away) and store."""
        await self.probe.stop()
        await self.owners.stop()
        await self.producers.stop()
        if self.heartbeat_sink is not None:
            await self.heartbeat_sink.stop()
        await self.group_offsets.stop()
        await self.schemas.stop()
        self.partitions.close()
        if self.standby is not None:
            self.standby.close()


#: allocations between two young-generation collections (CPython's default is 700)
GC_YOUNG_THRESHOLD = 50_000


def _settle_garbage_collector() -> None:
    """Start-up objects (modules, Faust's app, schemas) move out of the collector's sight, and young
    collections run less often: a batch allocates hundreds of thousands of short-lived dicts (decoded
    events), and the default threshold makes the collector walk them every 700 allocations. Reference
    counting frees them; the collector is only needed for cycles, which are rare there and still collected."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, middle, old)


def client_setup_failure(exc: ClientSetupError) -> str:
    """Why the worker's Kafka clients cannot be made; a key password that does not open the client key
    reads like the other refused credentials."""
    if isinstance(exc, KeyPasswordRefused):
        return f"Kafka refused the worker: {exc}"
    return f"cannot make the worker's Kafka clients: {exc}"


class _FaustWorker(faust.Worker):
    """Faust's worker without its terminal spinner, which writes cursor control bytes (``\\b\\x1b[?25h``)
    to stdout when the worker has started, terminal or not: the worker's output is log lines only (one
    JSON object each with ``--log-format json``)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.spinner = None


def kafka_refusal(exc: BaseException, kafka: KafkaConfig) -> str | None:
    """Why Kafka refuses this worker for good (authentication, certificates, TLS on one side only), naming
    the kafka.security key to fix and never a secret; None for what may pass (a broker not up yet)."""
    if isinstance(exc, KafkaAccessError):  # a client's start diagnosed it (runtime.kafka_clients)
        return str(exc.args[0]) if exc.args else str(exc)  # str() would start with the class name
    if isinstance(
        exc, SaslAuthenticationFailed | UnsupportedSaslMechanismError | ssl.SSLCertVerificationError
    ):
        return explain_kafka_error(exc, kafka)
    return None  # a connection closed or refused midway is a broker going away, not a refusal


def run_worker(config: CdcConfig) -> int:
    """Run until SIGINT/SIGTERM; the exit code is not 0 when the worker stopped on an error.

    WorkerError when Kafka refuses the worker (at start-up, or later when a client starts again)."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        worker = Worker(config)
    except BaseException as exc:
        loop.close()
        if isinstance(exc, ClientSetupError):  # Faust's broker credentials: a kafka.security file or key
            raise WorkerError(client_setup_failure(exc)) from None
        raise
    loop.run_until_complete(worker.prepare())
    faust_worker = _FaustWorker(worker.app, loop=loop, loglevel="WARNING", quiet=True, override_logging=False)
    try:
        faust_worker.execute_from_commandline()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    else:
        code = 0
    finally:
        if not loop.is_closed():
            loop.run_until_complete(worker.shutdown())
    failed = worker.loop.failed
    if failed is not None and (refusal := kafka_refusal(failed, config.kafka)) is not None:
        raise WorkerError(f"Kafka refused the worker: {refusal}") from failed
    if isinstance(failed, ClientSetupError):
        raise WorkerError(client_setup_failure(failed)) from None
    return 1 if failed is not None else code
