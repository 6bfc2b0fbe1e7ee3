"""A downstream Faust application: every change of one clean topic as one line of JSON on stdout.

    python examples/faust_consumer.py --bootstrap 127.0.0.1:9092 --topic cdc.shop.orders \\
        [--encoding json|json_schema|avro] [--registry-url URL] [--schema-cql FILE] [--app-id ID] \\
        [--datadir DIR] worker --without-web -l info

The options of this program select the clean topic and how it is encoded (the workers'
``worker.encoding`` and ``worker.schema_registry_url``); the others are Faust's command line (``--datadir``
before ``worker``; ``--without-web``, or Faust's worker serves HTTP on port 6066). ``--bootstrap`` defaults
to the environment variable ``KAFKA_BOOTSTRAP_SERVERS``; for a secured cluster, ``--config FILE`` takes
the ``kafka`` section (TLS, SASL) of the workers' YAML instead. With ``--schema-cql`` (the table's
``CREATE TABLE ... WITH ID`` as the schema topic carries it), keys and rows are typed records of that
table (``consumers.faust_models.row_model``); without it they are dicts. The printed line is the same:

    {"partition": 0, "offset": 7, "key": {"id": 1}, "tombstone": false, "op": "u",
     "before": {...}, "after": {...}, "source": {...}, "ts_ms": 1700000000000}

and after each delete the tombstone, ``{"partition": 0, "offset": 8, "key": {"id": 1}, "tombstone":
true, "op": null, ...}``. Blob values (bytes in Avro) print as base64.

Two settings matter for any consumer of the clean topics:

- isolation ``read_committed`` (``ReadCommittedApp``): the workers commit each batch in a Kafka
  transaction; a batch that fails is aborted and merged again, so a ``read_uncommitted`` reader (a plain
  ``faust.App``) would see changes twice, or changes that never happened.
- ``allow_empty`` on the topic (``change_topic`` sets it): a tombstone's value is None, not an error.

Offsets are committed at least once: after a crash the last changes may be printed again (a consumer
that must not repeat an effect keys it by partition and offset, or by ``source.write_time_us``).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
from pathlib import Path
from typing import Any

import faust

from cassandra_model.ddl_parser import load_schema_from_cql
from cassandra_model.table_schema import TableSchema
from consumers.faust_codec import ENCODINGS
from consumers.faust_models import ChangeEvent, as_dict, change_topic
from consumers.faust_read_committed import ReadCommittedApp
from runtime.config import KafkaConfig, load_config
from runtime.kafka_clients import faust_broker


def _options(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], add_help=False)
    parser.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092"))
    parser.add_argument("--config", type=Path, help="the workers' YAML: its kafka section is used")
    parser.add_argument("--topic", required=True, help="the clean topic, <prefix>.<keyspace>.<table>")
    parser.add_argument("--encoding", choices=ENCODINGS, default="json")
    parser.add_argument("--registry-url", help="the schema registry of the workers (encoding avro)")
    parser.add_argument("--schema-cql", type=Path, help="the table's CREATE TABLE, for typed records")
    parser.add_argument("--app-id", default="cdc-faust-consumer", help="Faust app id and consumer group")
    return parser.parse_known_args(argv)


def _table_schema(path: Path, topic: str) -> TableSchema:
    keyspace, table = topic.split(".")[-2:]
    schema = load_schema_from_cql(path).by_name(keyspace, table)
    if schema is None:
        raise SystemExit(f"--schema-cql {path}: no CREATE TABLE {keyspace}.{table} (of topic {topic}) in it")
    return schema


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def change_line(partition: int, offset: int, key: Any, change: ChangeEvent | None) -> str:
    """One record of the clean topic as one line of JSON (``change`` None: a tombstone)."""
    line: dict[str, Any] = {"partition": partition, "offset": offset, "key": as_dict(key)}
    if change is None:
        line.update(tombstone=True, op=None, before=None, after=None, source=None, ts_ms=None)
    else:
        line.update(tombstone=False, **change.as_envelope())
    return json.dumps(line, default=_json_default, ensure_ascii=False)


def build_app(options: argparse.Namespace) -> faust.App:
    kafka = (
        load_config(options.config).kafka
        if options.config
        else KafkaConfig(bootstrap_servers=options.bootstrap)
    )
    broker = faust_broker(kafka)
    app = ReadCommittedApp(
        options.app_id,
        broker=broker.urls,
        broker_credentials=broker.credentials,
        consumer_auto_offset_reset="earliest",
        autodiscover=False,
        store="memory://",
        topic_disable_leader=True,
    )
    schema = _table_schema(options.schema_cql, options.topic) if options.schema_cql else None
    topic = change_topic(
        app, options.topic, options.encoding, registry_url=options.registry_url, schema=schema
    )

    @app.agent(topic)
    async def print_changes(stream: faust.StreamT) -> None:
        async for event in stream.events():
            message = event.message
            # `faust worker` turns sys.stdout into a logger; the lines go to the real standard output
            line = change_line(message.partition, message.offset, event.key, event.value)
            print(line, file=sys.__stdout__, flush=True)

    return app


def main() -> None:
    options, faust_argv = _options(sys.argv[1:])
    app = build_app(options)
    sys.argv = [sys.argv[0], *faust_argv]
    app.main()


if __name__ == "__main__":
    main()
