"""Acceptance of the node agent under faults: kill -9, a Kafka outage, damaged segments, no Cassandra yet.

Nothing here corrupts a live Cassandra file (cdc_raw holds hard links to the commit log): damaged segments
are copies in a folder of the test's own that an agent is pointed at. Processed segments of node1 are
archived into the test's folder, so afterwards every archived segment can be decoded and checked against
the topic: a segment leaves cdc_raw only once all its events were acknowledged.
"""

from __future__ import annotations

import json
import random
import shutil
import struct
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.cdc_raw import list_cdc_segments
from agents.commitlog.log_reader import decode_segment
from agents.commitlog.segment_reader import SegmentScan
from cassandra_model.digest import update_digest
from cassandra_model.partition_update import PartitionUpdate
from cassandra_model.system_schema import load_schema_from_session
from infra.cassandra import CassandraNode, standalone_spec
from infra.settings import InfraSettings
from infra.stack import LocalStack
from tests.integration.agent_harness import (
    AgentProcess,
    LoadThread,
    Metrics,
    OffsetsWatcher,
    RawTopic,
    Write,
    cell,
    cql_session,
    create_keyspace,
    event_signature,
    execute_writes,
    expected_counter,
    free_port,
    int_bytes,
    multiset_difference,
    new_agent,
    row,
    text_bytes,
    unique_name,
    update,
    wait_until,
)

LOAD_WRITES = 50_000
OUTAGE_S = 30


def row_writes(keyspace: str, table: str, count: int, *, first_timestamp: int, pad: int = 0) -> list[Write]:
    """`count` inserts of (id, v) into `keyspace.table` (id int PRIMARY KEY, v text), ids 0..count-1.

    `pad` characters make each write larger (so segments fill and roll over).
    """
    writes = []
    for i in range(count):
        ts, value = first_timestamp + i, f"{i:09d}-" + "x" * pad
        writes.append(
            Write(
                f"INSERT INTO {keyspace}.{table} (id, v) VALUES (?, ?) USING TIMESTAMP ?",
                (i, value, ts),
                [
                    update(
                        keyspace,
                        table,
                        int_bytes(i),
                        rows=[row(liveness=(ts, 0), cells=[cell("v", text_bytes(value), ts)])],
                    )
                ],
            )
        )
    return writes


KV_TABLE = ["CREATE TABLE {ks}.t (id int PRIMARY KEY, v text) WITH cdc = true"]


# ---------------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class Kill:
    writes_done: int
    offsets: dict[int, int]  # offsets.json as last read before the kill: the restart must resume at or past
    restarted_at: float  # wall clock, seconds


def test_kill_9_three_times_during_a_50k_write_load_loses_nothing(
    cassandra_node: CassandraNode,
    kafka_bootstrap: str,
    session: Any,
    agents: list[AgentProcess],
    tmp_path: Path,
) -> None:
    """kill -9 at three random moments of the load, each followed by a restart: every write is on the
    topic at least once, the restarted agent resumes at its saved offsets (which never move backwards),
    and every segment the agent archived had all its events on the topic."""
    seed = random.SystemRandom().randrange(2**32)
    rng = random.Random(seed)
    where = f"(seed {seed})"
    ks = unique_name("agent_kill")
    create_keyspace(session, ks, KV_TABLE)
    agent = new_agent(
        agents, tmp_path, cdc_raw=cassandra_node.spec.cdc_raw, bootstrap=kafka_bootstrap, keyspaces=[ks]
    )
    writes = row_writes(ks, "t", LOAD_WRITES, first_timestamp=int(time.time() * 1e6), pad=300)
    # one random moment in each of three windows of the load, the last well before its end, so that each
    # kill finds the agent restarted and busy, and the load still running
    windows = [(0.1, 0.3), (0.35, 0.55), (0.6, 0.8)]
    kill_after = [rng.randrange(int(LOAD_WRITES * a), int(LOAD_WRITES * b)) for a, b in windows]
    kills: list[Kill] = []

    with OffsetsWatcher(agent.offsets_path) as watcher:
        agent.start()
        agent.wait_healthy()
        with LoadThread(session, writes, chunk=250) as load:
            for threshold in kill_after:
                wait_until(
                    lambda t=threshold: load.progress >= t or load.done, 300, f"{threshold} writes {where}"
                )
                time.sleep(rng.uniform(0, 0.5))
                offsets = watcher.sample()
                done = load.progress
                agent.kill()
                kills.append(Kill(done, offsets, time.time()))
                agent.start()
                agent.wait_healthy()
            written = load.finish()
        load_s = load.finished_at - load.started_at
        assert len(written) == LOAD_WRITES
        late = [k.writes_done for k in kills if k.writes_done >= LOAD_WRITES]
        assert not late, (
            f"kills after the load ended {where}: writes done at each kill {[k.writes_done for k in kills]}"
        )

        expected = expected_counter(written)
        with RawTopic(kafka_bootstrap, agent.raw_topic) as topic:
            caught_up_s = topic.wait_for(expected, 240, what=f"all {LOAD_WRITES} writes {where}")
            topic.drain(quiet_s=1.0)
            records = list(topic.records)
            unexpected = set(topic.signatures()) - set(expected)
            assert not unexpected, f"{len(unexpected)} events match no write, e.g. {list(unexpected)[:2]}"
            topic.check_partitioning()
        assert agent.stop() == 0, f"exit code on SIGTERM; log:\n{agent.log_tail()}"
        watcher.sample()

    assert watcher.reads > 100, f"offsets.json was read only {watcher.reads} times"
    assert not watcher.violations, f"offsets moved backwards {where}: {watcher.violations[:5]}"
    for number, kill in enumerate(kills, 1):
        # records the restarted processes made: none before the offset the killed one had saved
        resent_early = [
            (r.event["source"]["segment_id"], r.event["source"]["position"])
            for r in records
            if r.event["source"]["published_at_ms"] >= kill.restarted_at * 1000
            and r.event["source"]["position"] <= kill.offsets.get(r.event["source"]["segment_id"], -1)
        ]
        assert not resent_early, (
            f"after kill {number} {where} the agent re-read before its saved offsets {kill.offsets}: "
            f"(segment, position) {resent_early[:5]}"
        )
    duplicates = len(records) - len(expected)

    archive = tmp_path / "agent-archive"
    archived = sorted(archive.glob("CommitLog-*.log"))
    assert archived, f"no segment was archived during {LOAD_WRITES} writes of ~330 bytes {where}"
    catalog = load_schema_from_session(session, [ks])
    on_topic = {r.digest for r in records}
    checked = 0
    for path in archived:
        assert path.with_name(path.stem + "_cdc.idx").exists(), f"{path.name} archived without its _cdc.idx"
        updates, decoder = decode_segment(path, catalog, completed=True)
        assert not decoder.damage, f"{path.name}: {decoder.damage}"
        mine = [u for u in updates if u.keyspace == ks]
        missing = [u.position for u in mine if update_digest(u) not in on_topic]
        assert not missing, (
            f"{path.name} was archived with {len(missing)} of its {len(mine)} updates not on the topic "
            f"(positions {missing[:5]}) {where}"
        )
        checked += len(mine)
    assert checked, f"the archived segments {[p.name for p in archived]} hold no write of the load"
    print(
        f"load {load_s:.1f} s, kills after {[k.writes_done for k in kills]} writes {where}, "
        f"{duplicates} redeliveries, caught up {caught_up_s:.1f} s after the load; "
        f"{len(archived)} segments archived holding {checked} of the writes"
    )


# ---------------------------------------------------------------------------------------------------------


def pressure(metrics: Metrics) -> tuple[float, float, float]:
    return (
        metrics.value("cdc_agent_lag_bytes"),
        metrics.value("cdc_agent_oldest_unprocessed_segment_age_seconds"),
        metrics.value("cdc_agent_send_errors_total"),
    )


def test_broker_outage_of_30s_during_load_loses_nothing(
    cassandra_node: CassandraNode,
    kafka_bootstrap: str,
    local_stack: LocalStack,
    session: Any,
    agents: list[AgentProcess],
    tmp_path: Path,
) -> None:
    """Kafka stopped for 30 s while writes go on: the lag and the oldest unprocessed segment's age rise,
    send errors are counted, and once Kafka is back every write is published and the lag returns to 0.

    kafka.request_timeout_ms is 10 s (default 30 s) so failed sends are counted well within the outage.
    """
    ks = unique_name("agent_outage")
    create_keyspace(session, ks, KV_TABLE)
    agent = new_agent(
        agents,
        tmp_path,
        cdc_raw=cassandra_node.spec.cdc_raw,
        bootstrap=kafka_bootstrap,
        keyspaces=[ks],
        kafka={"request_timeout_ms": 10_000},
    )
    agent.start()
    agent.wait_healthy()
    writes = row_writes(ks, "t", 20_000, first_timestamp=int(time.time() * 1e6))
    samples: list[tuple[float, float, float]] = []
    with LoadThread(session, writes, chunk=50, per_second=150) as load:
        try:
            with RawTopic(kafka_bootstrap, agent.raw_topic) as topic:
                topic.wait_for(expected_counter(writes[:200]), 60, what="the first writes before the outage")
            before = pressure(agent.metrics())
            local_stack.kafka.stop()
            outage_started = time.monotonic()
            while time.monotonic() - outage_started < OUTAGE_S:
                time.sleep(1)
                samples.append(pressure(agent.metrics()))
            health_during = agent.health()
        finally:
            local_stack.kafka.start()  # the session's other tests need the broker
        time.sleep(3)  # writes go on after the restart too
        load.stop()
        written = load.finish()

    max_lag, max_age = max(s[0] for s in samples), max(s[1] for s in samples)
    assert max_lag > before[0] or max_age > before[1], (
        f"neither lag_bytes ({before[0]} before, max {max_lag} during) nor the oldest segment's age "
        f"({before[1]} s before, max {max_age} s during) rose in the outage"
    )
    assert samples[-1][2] > before[2], f"send_errors_total stayed at {before[2]} during the outage: {samples}"
    assert health_during is not None and not health_during["kafka_connected"], (
        f"health during: {health_during}"
    )
    assert health_during["status"] == "degraded" and health_during["http_status"] == 200, (
        f"a pass over cdc_raw waiting for Kafka is no stall to restart for: {health_during}"
    )
    assert any("Kafka" in problem for problem in health_during["problems"]), f"health during: {health_during}"

    expected = expected_counter(written)
    with RawTopic(kafka_bootstrap, agent.raw_topic) as topic:
        topic.wait_for(expected, 120, what=f"all {len(written)} writes after Kafka came back")
        topic.drain(quiet_s=1.0)
        unexpected = set(topic.signatures()) - set(expected)
        assert not unexpected, f"{len(unexpected)} events match no write"
        topic.check_partitioning()
        redelivered = len(topic.records) - len(written)
    wait_until(
        lambda: agent.metrics().value("cdc_agent_lag_bytes") == 0,
        30,
        lambda: f"lag_bytes back to 0 (is {agent.metrics().value('cdc_agent_lag_bytes')})",
        interval_s=0.2,
    )
    health = agent.health()
    assert health is not None and health["status"] == "ok" and health["kafka_connected"], (
        f"health after: {health}"
    )
    assert agent.stop() == 0, f"exit code on SIGTERM; log:\n{agent.log_tail()}"
    print(
        f"{len(written)} writes; lag {before[0]:.0f} -> max {max_lag:.0f} B, age {before[1]:.1f} -> max "
        f"{max_age:.1f} s, send errors {before[2]:.0f} -> {samples[-1][2]:.0f}; {redelivered} redeliveries"
    )


# ---------------------------------------------------------------------------------------------------------


def completed_segments_with(
    cdc_raw: Path, catalog: Any, keyspace: str
) -> list[tuple[Path, list[PartitionUpdate]]]:
    """COMPLETED segments of cdc_raw holding updates of `keyspace`.t, oldest first, with those updates."""
    found = []
    for segment in list_cdc_segments(cdc_raw):
        if segment.index is None or not segment.index.completed:
            continue
        updates, _ = decode_segment(segment.path, catalog, completed=True)
        mine = [u for u in updates if (u.keyspace, u.table) == (keyspace, "t")]
        if mine:
            found.append((segment.path, mine))
    return found


def sync_markers(data: bytes, header_end: int) -> list[int]:
    """File offsets of the sync markers of an uncompressed segment, following each marker's next offset."""
    markers = []
    offset = header_end
    while offset + 8 <= len(data):
        (following,) = struct.unpack_from(">i", data, offset)
        if following <= offset or following > len(data):
            break
        markers.append(offset)
        offset = following
    return markers


def header_end(path: Path) -> int:
    """Where the first sync marker of a segment starts (after its header and the header's CRC)."""
    with SegmentScan(path, completed=True) as scan:
        assert scan.descriptor is not None, f"{path.name}: no header"
        return scan.descriptor.header_end


def flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def test_corrupted_segments_are_quarantined_and_later_segments_still_processed(
    cassandra_node: CassandraNode,
    kafka_bootstrap: str,
    session: Any,
    agents: list[AgentProcess],
    tmp_path: Path,
) -> None:
    """Copies of five real COMPLETED segments; in the second an entry body is damaged (its CRC fails), in
    the third a sync marker, in the fourth the header. Each damaged one is copied to quarantine with a
    report naming segment, offset and reason; every undamaged write is published, the damaged ones not."""
    ks = unique_name("agent_damage")
    create_keyspace(
        session, ks, [*KV_TABLE, "CREATE TABLE {ks}.filler (id int PRIMARY KEY, b blob) WITH cdc = false"]
    )
    # rows in small groups (several sync sections per segment), 3 MiB blobs to roll 8 MiB segments over
    writes = row_writes(ks, "t", 6 * 8 * 25, first_timestamp=int(time.time() * 1e6))
    blob = random.Random(7).randbytes(3 * 2**20)
    prepared: dict[str, Any] = {}
    fill = session.prepare(f"INSERT INTO {ks}.filler (id, b) VALUES (?, ?)")
    for group in range(0, len(writes), 25):
        execute_writes(session, writes[group : group + 25], prepared=prepared)
        time.sleep(0.15)  # past the 100 ms periodic sync: the next group starts a new section
        if group % 100 == 75:
            session.execute(fill, (group, blob))
    catalog = load_schema_from_session(session, [ks])
    cdc_raw = cassandra_node.spec.cdc_raw
    wait_until(lambda: len(completed_segments_with(cdc_raw, catalog, ks)) >= 5, 60, "five COMPLETED segments")
    originals = completed_segments_with(cdc_raw, catalog, ks)[:5]

    folder = tmp_path / "cdc_raw"
    folder.mkdir()
    for path, _ in originals:  # copies: never touch the files Cassandra hard-linked
        shutil.copy2(path, folder / path.name)
        shutil.copy2(path.with_name(path.stem + "_cdc.idx"), folder / (path.stem + "_cdc.idx"))
    names = [path.name for path, _ in originals]
    by_id = {w.params[0]: w for w in writes}

    def key(u: PartitionUpdate) -> int:
        return struct.unpack(">i", u.partition_key)[0]

    # second segment: one entry in the middle, body byte flipped
    entry_updates = originals[1][1]
    victim = entry_updates[len(entry_updates) // 2]
    assert victim.offset is not None
    flip(folder / names[1], victim.offset + 8 + 4)
    lost = {key(victim)}
    # third segment: a sync marker with rows of ours before it, its CRC flipped (the rest is unlocatable)
    third = originals[2][1]
    markers = sync_markers((folder / names[2]).read_bytes(), header_end(folder / names[2]))
    first_row = min(u.offset or 0 for u in third)
    candidates = [m for m in markers if m > first_row and any((u.offset or 0) > m for u in third)]
    assert candidates, f"{names[2]}: no sync marker between rows of ours (markers {markers})"
    marker = candidates[len(candidates) // 2]
    flip(folder / names[2], marker + 5)
    lost |= {key(u) for u in third if (u.offset or 0) > marker}
    # fourth segment: a byte of the segment id in its header (the header CRC, just before the first
    # sync marker, then fails)
    header_crc_at = header_end(folder / names[3]) - 4
    flip(folder / names[3], 6)
    lost |= {key(u) for u in originals[3][1]}
    damaged = {name: (folder / name).read_bytes() for name in names[1:4]}
    present = {key(u) for _, ups in originals for u in ups} - lost
    assert present and len(lost) > 2

    agent = new_agent(
        agents, tmp_path, cdc_raw=folder, bootstrap=kafka_bootstrap, keyspaces=[ks], archive=False
    )
    agent.start()
    agent.wait_healthy()
    expected = expected_counter(by_id[k] for k in present)
    with RawTopic(kafka_bootstrap, agent.raw_topic) as topic:
        topic.wait_for(expected, 60, what="the writes in undamaged parts")
        wait_until(
            lambda: not list(folder.glob("*.log")),
            30,
            lambda: f"all segments released: {sorted(folder.iterdir())}",
        )
        topic.drain(quiet_s=1.0)
        difference = multiset_difference(expected, topic.signatures())
        assert not difference, f"the raw topic differs from the writes in undamaged parts: {difference}"
        published_lost = [
            k for k in lost if any(event_signature(r.event) in by_id[k].expected for r in topic.records)
        ]
        assert not published_lost, f"writes in damaged parts were published: ids {published_lost[:5]}"

    quarantine = Path(agent.config["agent"]["state_directory"]) / "quarantine"
    reports = {
        p.name.removesuffix(".report.json"): json.loads(p.read_text())
        for p in quarantine.glob("*.report.json")
    }
    assert sorted(reports) == sorted(names[1:4]), f"reports for {sorted(reports)}, expected {names[1:4]}"
    wanted = {
        names[1]: (victim.offset, "entry", "entry body CRC mismatch"),
        names[2]: (marker, "segment-rest", "sync marker CRC mismatch"),
        names[3]: (header_crc_at, "segment", "descriptor header CRC mismatch"),
    }
    for name, (offset, scope, reason) in wanted.items():
        report = reports[name]
        assert report["segment"] == name and len(report["problems"]) == 1, f"{name}: report {report}"
        problem = report["problems"][0]
        assert problem["segment"] == name and problem["scope"] == scope and reason in problem["reason"], (
            f"{name}: problem {problem}, expected scope {scope} and a reason saying {reason!r}"
        )
        assert problem["offset"] == offset, (
            f"{name}: problem at offset {problem['offset']}, expected {offset}"
        )
        assert (quarantine / name).read_bytes() == damaged[name], f"{name}: the quarantined copy differs"
        assert (quarantine / name.replace(".log", "_cdc.idx")).exists(), f"{name}: idx not quarantined"
    metrics = agent.metrics()
    counts = Counter(
        {
            "quarantined": metrics.value("cdc_agent_segments_quarantined_total"),
            "damaged_regions": metrics.value("cdc_agent_damaged_regions_total"),
            "released": metrics.value("cdc_agent_segments_released_total"),
        }
    )
    assert counts == Counter(quarantined=3, damaged_regions=2, released=5), f"metrics {dict(counts)}"
    log = agent.log_text()
    for name in names[1:4]:
        assert any("ERROR" in line and name in line for line in log.splitlines()), (
            f"no ERROR log line names {name}"
        )
    assert agent.stop() == 0


# ---------------------------------------------------------------------------------------------------------


def test_agent_started_before_cassandra_waits_then_captures(
    infra_settings: InfraSettings, kafka_bootstrap: str, agents: list[AgentProcess], tmp_path: Path
) -> None:
    """An agent started before its node (no cdc_raw folder, CQL not answering) says "starting" (503) and
    waits; once the node is up it becomes ok and publishes writes from the segments that appear."""
    name = unique_name("agent-early").replace("_", "-")
    spec = standalone_spec(infra_settings, name, address="127.0.1.200", jmx_port=free_port())
    assert not spec.cdc_raw.exists()
    node = CassandraNode(spec, infra_settings)
    ks = unique_name("agent_early")
    agent = new_agent(
        agents, tmp_path, cdc_raw=spec.cdc_raw, bootstrap=kafka_bootstrap, keyspaces=[ks],
        contact_points=[spec.address], node=name,
    )  # fmt: skip
    agent.start()
    try:
        wait_until(lambda: agent.health() is not None, 30, lambda: f"/health to answer:\n{agent.log_tail()}")
        observed = []
        for _ in range(6):
            observed.append(agent.health())
            time.sleep(0.5)
        assert all(
            h is not None and (h["status"], h["http_status"]) == ("starting", 503) for h in observed
        ), f"health before Cassandra: {observed}"
        assert agent.running and agent.metrics().value("cdc_agent_events_published_total") == 0
        assert "not answering schema queries" in agent.log_text(), agent.log_tail()

        node.start()
        agent.wait_healthy(timeout_s=90)
        writes = row_writes(ks, "t", 300, first_timestamp=int(time.time() * 1e6))
        with cql_session(spec.address, spec.cql_port) as s:
            create_keyspace(s, ks, KV_TABLE)
            execute_writes(s, writes)
        expected = expected_counter(writes)
        with RawTopic(kafka_bootstrap, agent.raw_topic) as topic:
            topic.wait_for(expected, 60, what="the writes to the node started after the agent")
            topic.drain(quiet_s=1.0)
            difference = multiset_difference(expected, topic.signatures())
            assert not difference, f"the raw topic differs from the writes: {difference}"
            assert {r.node for r in topic.records} == {name}
        assert agent.stop() == 0, f"exit code on SIGTERM; log:\n{agent.log_tail()}"
    finally:
        agent.ensure_stopped()
        node.stop()
        shutil.rmtree(spec.root, ignore_errors=True)
