"""A Faust application whose Kafka consumer reads with isolation ``read_committed``.

Every worker batch is one Kafka transaction, and a batch that does not commit is aborted and merged
again: a clean-topic reader must skip aborted records (or it sees changes twice, and changes that never
happened) and stop at open transactions. Faust 0.15 reads committed records only in its exactly-once
mode (``processing_guarantee="exactly_once"``), which also makes it commit offsets through one
transactional producer per partition; a consumer that writes nothing needs none of that, and that
commit path fails when a worker stops right after reading past transaction markers ("Not in the middle
of a transaction") and then hangs instead of exiting. ``ReadCommittedApp`` keeps Faust's ordinary
at-least-once commits and only gives its aiokafka consumer the isolation level.
"""

from __future__ import annotations

from typing import Any

import aiokafka
import faust
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types.transports import TransportT

READ_COMMITTED = "read_committed"


class _ReadCommittedThread(faust_aiokafka.AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport: Any) -> aiokafka.AIOKafkaConsumer:
        consumer = super()._create_worker_consumer(transport)
        # aiokafka hands the isolation level to its fetcher when the consumer starts, which Faust does
        # after this returns
        consumer._isolation_level = READ_COMMITTED
        return consumer


class _ReadCommittedConsumer(faust_aiokafka.Consumer):
    def _new_consumer_thread(self) -> faust_aiokafka.AIOKafkaConsumerThread:
        return _ReadCommittedThread(self, loop=self.loop, beacon=self.beacon)


class _ReadCommittedTransport(faust_aiokafka.Transport):
    Consumer = _ReadCommittedConsumer


class ReadCommittedApp(faust.App):
    """``faust.App`` whose worker consumer reads only committed records (``kafka://`` brokers)."""

    def _new_transport(self) -> TransportT:
        urls = self.conf.broker_consumer
        schemes = {url.scheme for url in urls}
        if schemes - {"kafka", "aiokafka"}:
            raise ValueError(
                f"ReadCommittedApp {self.conf.id}: broker {', '.join(map(str, urls))} is not a kafka:// URL "
                "(only Faust's aiokafka transport can be given read_committed here)"
            )
        return _ReadCommittedTransport(urls, self)
