"""The process log's filters (runtime/logs.py): retried client errors as warnings, repeats summarised.

Records are made as aiokafka makes them (its messages and arguments, its real exception types) and
written through the handler `configure_logging` installs, on a clock given by hand.
"""

from __future__ import annotations

import io
import json
import logging

import pytest
from aiokafka.errors import (
    GroupAuthorizationFailedError,
    GroupCoordinatorNotAvailableError,
    KafkaConnectionError,
    KafkaError,
    LeaderNotAvailableError,
    NotLeaderForPartitionError,
)

from runtime.logs import (
    REPEAT_WINDOW_S,
    JsonFormatter,
    Repeats,
    RepeatsSummarised,
    RetriedAsWarnings,
    configure_logging,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def record(name: str, level: int, msg: str, *args: object) -> logging.LogRecord:
    return logging.LogRecord(name, level, "aiokafka.py", 1, msg, args, None)


def test_repeats_write_the_first_hold_back_the_window_and_count_them_into_the_next() -> None:
    repeats = Repeats(30.0)
    assert repeats.note(100.0) == (0, 0.0)
    assert [repeats.note(t) for t in (101.0, 110.0, 129.0)] == [None, None, None]
    assert repeats.note(131.0) == (3, 31.0)
    assert repeats.note(140.0) is None
    assert repeats.overdue(150.0) is None, "its window is still open"
    assert repeats.overdue(161.0) == (1, 30.0)
    assert repeats.overdue(200.0) is None, "summarised once"
    assert repeats.note(300.0) == (0, 0.0), "after a quiet spell, the next one is a first one again"


@pytest.mark.parametrize(
    ("logger", "msg", "args"),
    [
        ("aiokafka.consumer.group_coordinator", "Group Coordinator Request failed: %s",
         (GroupCoordinatorNotAvailableError(),)),
        ("aiokafka.consumer.fetcher", "Failed fetch offsets from %s: %s", (1, NotLeaderForPartitionError())),
        ("aiokafka", "Unable connect to node with id %s: %s",
         (1, ConnectionRefusedError(111, "Connect call failed"))),
        ("aiokafka", "Unable to update metadata from %s", ([1],)),
        ("aiokafka.consumer.fetcher", "Failed fetch messages from %s: %s", (1, KafkaConnectionError("closed"))),
    ],
)  # fmt: skip
def test_errors_aiokafka_retries_itself_are_warnings(logger: str, msg: str, args: tuple[object, ...]) -> None:
    """What a fresh broker (no group coordinator, no partition leader yet) or a broker going away makes
    aiokafka log at ERROR, while it retries."""
    entry = record(logger, logging.ERROR, msg, *args)
    assert RetriedAsWarnings().filter(entry)
    assert (entry.levelno, entry.levelname) == (logging.WARNING, "WARNING")


def test_errors_aiokafka_does_not_retry_stay_errors() -> None:
    entry = record(
        "aiokafka.consumer.group_coordinator",
        logging.ERROR,
        "Unexpected error in join group '%s' response: %s",
        "app",
        GroupAuthorizationFailedError(),
    )
    assert RetriedAsWarnings().filter(entry)
    assert entry.levelname == "ERROR"
    ours = record("app.worker", logging.ERROR, "failed: %s", KafkaConnectionError("x"))
    RetriedAsWarnings().filter(ours)
    assert ours.levelname == "ERROR", "only the client's own records"


def written(handler_filter: RepeatsSummarised, records: list[logging.LogRecord]) -> list[str]:
    return [r.getMessage() for r in records if handler_filter.filter(r)]


def test_a_ten_minute_outage_of_reconnect_errors_is_a_few_dozen_lines_and_every_repeat_is_counted() -> None:
    """aiokafka's reconnect errors at 400 a second for ten minutes (254,340 lines, 43 MB, in an
    outage like this one): one line per message kind per window, each saying how many it stands for."""
    clock = Clock()
    repeats = RepeatsSummarised(clock=clock)
    lines: list[str] = []
    total = 0
    for _ in range(600 * 2):  # every 0.5 s, 100 of each
        for _ in range(100):
            for entry in (
                record("aiokafka", logging.WARNING, "Unable connect to node with id %s: %s", 1, OSError("x")),
                record("aiokafka", logging.WARNING, "Unable to update metadata from %s", [1]),
            ):
                total += 1
                if repeats.filter(entry):
                    lines.append(entry.getMessage())
        lines.extend(s.getMessage() for s in repeats.overdue())
        clock.now += 0.5
    clock.now += REPEAT_WINDOW_S
    lines.extend(s.getMessage() for s in repeats.overdue())

    assert len(lines) <= 2 * (600 / REPEAT_WINDOW_S + 2), len(lines)
    counted = 0
    for line in lines:
        counted += 1
        if "more like it in the last" in line:
            counted += int(line.split("[and ", 1)[1].split(" ", 1)[0])
        elif "more like this in the last" in line:
            counted += int(line.split(" ", 1)[0]) - 1
    assert counted == total, "a repeat was neither written nor counted"
    assert lines[0] == "Unable connect to node with id 1: x"
    assert lines[2].startswith("Unable connect to node with id 1: x [and 5999 more like it in the last 30 s")


def test_our_own_records_and_infos_are_never_held_back() -> None:
    repeats = RepeatsSummarised(clock=Clock())
    ours = [record("app.batch_loop", logging.ERROR, "raw record %d dead-lettered", i) for i in range(5)]
    infos = [record("aiokafka", logging.INFO, "joined group %s", "g") for _ in range(5)]
    assert len(written(repeats, ours + infos)) == 10


def test_the_configured_handler_writes_json_lines_with_the_summaries_and_retried_errors_as_warnings() -> None:
    clock = Clock()
    stream = io.StringIO()
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        configure_logging(json_lines=True, clock=clock)
        handler = root.handlers[0]
        handler.setStream(stream)  # type: ignore[attr-defined]
        client = logging.getLogger("aiokafka")
        for _ in range(50):
            client.error("Unable connect to node with id %s: %s", 1, ConnectionRefusedError(111, "refused"))
        clock.now += REPEAT_WINDOW_S + 1
        logging.getLogger("app.worker").info("Kafka answers again")
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [(e["level"], e["logger"]) for e in lines] == [
        ("WARNING", "aiokafka"),
        ("WARNING", "aiokafka"),
        ("INFO", "app.worker"),
    ]
    assert lines[1]["message"] == (
        "49 more like this in the last 31 s, not logged: Unable connect to node with id %s: %s"
    )


def test_json_formatter_writes_one_object_per_line_for_multiline_messages() -> None:
    text = JsonFormatter().format(record("app", logging.WARNING, "two\nlines"))
    assert "\n" not in text and json.loads(text)["message"] == "two\nlines"


def leftover(error: BaseException) -> logging.LogRecord:
    """What asyncio logs when a future that failed is collected with its exception never retrieved."""
    entry = logging.LogRecord(
        "asyncio", logging.ERROR, "base_events.py", 1, f"Future exception was never retrieved\nfuture: "
        f"<Future finished exception={error!r}>", None, (type(error), error, None),
    )  # fmt: skip
    return entry


def test_kafka_errors_left_in_futures_after_an_outage_are_retried_warnings_and_summarised() -> None:
    """aiokafka fails a record batch that waited through an outage for a partition leader on a second
    future no one awaits: 75 such ERROR records in one worker's log after a 60 s outage."""
    entries = [leftover(LeaderNotAvailableError()) for _ in range(75)]
    for entry in entries:
        RetriedAsWarnings().filter(entry)
    assert {e.levelname for e in entries} == {"WARNING"}
    assert len(written(RepeatsSummarised(clock=Clock()), entries)) == 1

    ours = leftover(ValueError("a bug of ours"))
    RetriedAsWarnings().filter(ours)
    assert ours.levelname == "ERROR", "anything else left in a future stays an error"
    assert len(written(RepeatsSummarised(clock=Clock()), [leftover(ValueError("x")) for _ in range(3)])) == 3


def caused_by(outer: BaseException, *causes: BaseException) -> BaseException:
    """``outer`` raised from the first cause, raised from the next..., as aiokafka chains them."""
    link = outer
    for cause in causes:
        link.__cause__ = cause
        link = cause
    return outer


def test_errors_caused_by_a_closed_connection_are_warnings_and_other_causes_stay_errors() -> None:
    """When a connection closes under a transactional request aiokafka's sender dies with "Unexpected
    error in sender routine" (and leaves the same error in a future): the worker makes a new producer and
    retries the batch, so a broker outage wrote ERROR lines the README says it does not."""
    connection = caused_by(
        KafkaError("Unexpected error during batch delivery"),
        KafkaError("KafkaConnectionError('Connection at 127.0.0.1:9092 closed')"),
        KafkaConnectionError("Connection at 127.0.0.1:9092 closed"),
    )
    sender = logging.LogRecord("aiokafka.producer.sender", logging.ERROR, "sender.py", 1,
                               "Unexpected error in sender routine", None, (KafkaError, connection, None))  # fmt: skip
    left = leftover(connection)
    for entry in (sender, left):
        RetriedAsWarnings().filter(entry)
        assert entry.levelname == "WARNING", entry.getMessage()

    bug = caused_by(KafkaError("Unexpected error during batch delivery"), ValueError("a bug"))
    other = logging.LogRecord("aiokafka.producer.sender", logging.ERROR, "sender.py", 1,
                              "Unexpected error in sender routine", None, (KafkaError, bug, None))  # fmt: skip
    RetriedAsWarnings().filter(other)
    assert other.levelname == "ERROR", "a cause aiokafka does not retry stays an error"


def test_tasks_of_a_client_stopped_past_its_deadline_are_warnings_and_summarised() -> None:
    """stop_client closes a client that did not stop in time and leaves its tasks behind: asyncio then
    reports each one as destroyed while pending (eight ERROR records in one worker after an outage)."""

    def destroyed(coro: str, where: str) -> logging.LogRecord:
        return logging.LogRecord("asyncio", logging.ERROR, "base_events.py", 1,
                                 f"Task was destroyed but it is pending!\ntask: <Task pending name='Task-{id(coro)}' "
                                 f"coro=<{coro}() done, defined at {where}:99> wait_for=<Future pending>>",
                                 None, None)  # fmt: skip

    site = "/srv/venv/lib/python3.11/site-packages/aiokafka/producer/sender.py"
    entries = [destroyed(coro, site) for coro in ["Sender._sender_routine", "Sender._do_txn_commit"] * 4]
    for entry in entries:
        RetriedAsWarnings().filter(entry)
    assert {e.levelname for e in entries} == {"WARNING"}
    assert len(written(RepeatsSummarised(clock=Clock()), entries)) == 1

    ours = destroyed("BatchLoop.process", "/srv/app/batch_loop.py")
    RetriedAsWarnings().filter(ours)
    assert ours.levelname == "ERROR", "a task of ours destroyed while pending stays an error"
