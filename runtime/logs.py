"""Process logging: one JSON object per line (structured, for log pipelines) or plain text.

Two filters keep the Kafka client's and Faust's records (CLIENT_LOGGERS) readable:

- ``RetriedAsWarnings``: aiokafka logs at ERROR what it retries by itself (a broker that does not answer
  yet, a group coordinator or a partition leader not elected yet on a fresh broker): those records are
  written as WARNING. So are asyncio's "Future exception was never retrieved" for a retriable Kafka error:
  aiokafka fails a record batch that waited for a partition leader through an outage on a second future
  of its own that no one awaits (the worker handled the batch's failure: its transaction is retried).
  An error caused by one it retries counts as retried (aiokafka's sender dies with "Unexpected error in
  sender routine" when a connection closes under a transactional request: the worker makes a new
  producer), and so does asyncio's "Task was destroyed but it is pending!" for an aiokafka task: a client
  stopped past its deadline (runtime.kafka_clients.stop_client) leaves its tasks behind on purpose.
  Errors it does not retry stay ERROR;
- ``RepeatsSummarised``: a record repeated (same logger, level and message template, whatever its
  arguments) is written once, then held back for REPEAT_WINDOW_S; the next one written after that says
  how many were held back and over how long. A ten-minute broker outage made aiokafka write about
  250,000 reconnect errors (43 MB); summarised, a few dozen lines. Repeats held back when the messages
  stop are summarised by the next record of the process (the worker and agent write one when Kafka
  answers again).

``Repeats`` is the bookkeeping, shared with the agent's summary of failed sends.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from aiokafka.errors import KafkaError

#: loggers whose records are filtered (and their children)
CLIENT_LOGGERS = ("aiokafka", "kafka", "faust", "mode")
#: how long repeats of one message are held back before they are summarised
REPEAT_WINDOW_S = 30.0
#: kinds of message followed at once (more are dropped when quiet)
MAX_KINDS = 1000
#: aiokafka messages logged at ERROR for conditions it retries, whatever their arguments
_RETRIED_MESSAGES = frozenset(
    {
        "Unable to update metadata from %s",
        "Heartbeat session expired - marking coordinator dead",
        "Topic %s not found in cluster metadata",
    }
)


@dataclass(slots=True)
class Repeats:
    """How often one kind of message came since it was last written: the first is written, those within
    ``window_s`` after it held back, and the first one after the window written with their count."""

    window_s: float = REPEAT_WINDOW_S
    #: when the last one written was (None: none yet, or the last window closed without repeats)
    written_at: float | None = None
    held: int = 0

    def note(self, now: float) -> tuple[int, float] | None:
        """One more occurrence at ``now``: None to hold it back; otherwise write it, with (how many were
        held back since the last one written, seconds since that one; 0 for the first)."""
        if self.written_at is not None and now - self.written_at < self.window_s:
            self.held += 1
            return None
        held, since = self.held, 0.0 if self.written_at is None else now - self.written_at
        self.held, self.written_at = 0, now
        return held, since

    def overdue(self, now: float) -> tuple[int, float] | None:
        """Repeats held back whose window has passed with no occurrence since: (how many, over how long),
        to be summarised now; the next occurrence is then written as a first one."""
        if not self.held or self.written_at is None or now - self.written_at < self.window_s:
            return None
        held, since = self.held, now - self.written_at
        self.held, self.written_at = 0, None
        return held, since


def _is_client(record: logging.LogRecord) -> bool:
    name = record.name
    return any(name == root or name.startswith(root + ".") for root in CLIENT_LOGGERS) or _client_leftover(
        record
    )


def _client_leftover(record: logging.LogRecord) -> bool:
    """asyncio's report of a future that failed with a Kafka client error no one retrieved, or of a
    Kafka client's task left pending."""
    if record.name != "asyncio":
        return False
    error = record.exc_info[1] if record.exc_info else None
    return isinstance(error, KafkaError) or _abandoned_client_task(record)


def _abandoned_client_task(record: logging.LogRecord) -> bool:
    message = str(record.msg)
    return message.startswith("Task was destroyed but it is pending!") and "/aiokafka/" in message


class RetriedAsWarnings(logging.Filter):
    """aiokafka's ERROR records of conditions it retries (a retriable Kafka error or a connection error
    among the arguments or as the exception, or one of _RETRIED_MESSAGES), and asyncio's reports of such
    errors left in futures, become WARNING records."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.ERROR and _is_client(record) and _retried(record):
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


def _retried(record: logging.LogRecord) -> bool:
    if not record.name.startswith("aiokafka") and not _client_leftover(record):
        return False
    if record.msg in _RETRIED_MESSAGES or _abandoned_client_task(record):
        return True
    args = record.args if isinstance(record.args, tuple) else ()
    if record.exc_info and record.exc_info[1] is not None:
        args = (*args, record.exc_info[1])
    for arg in args:
        if isinstance(arg, type) and issubclass(arg, KafkaError):
            arg = arg()
        if isinstance(arg, BaseException) and any(map(_retried_error, _causes(arg))):
            return True
    return False


def _retried_error(error: BaseException) -> bool:
    """A retriable Kafka error, or a connection refused, reset or timed out."""
    return (isinstance(error, KafkaError) and error.retriable) or isinstance(error, OSError)


def _causes(error: BaseException) -> list[BaseException]:
    """The error and what caused it, outermost first (a few links at most; cycles cut)."""
    chain: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in chain and len(chain) < 8:
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


class RepeatsSummarised(logging.Filter):
    """Repeated records of CLIENT_LOGGERS (WARNING and above) written once per ``window_s``, with the
    count of those held back; ``clock`` gives monotonic seconds."""

    def __init__(
        self, window_s: float = REPEAT_WINDOW_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__()
        self.window_s = window_s
        self.clock = clock
        self._repeats: dict[tuple[str, int, str], Repeats] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING or not _is_client(record):
            return True
        message = str(record.msg)
        if _client_leftover(record):  # its later lines name one task or future: one kind for them all
            message = message.split("\n", 1)[0]
        key = (record.name, record.levelno, message)
        now = self.clock()
        repeats = self._repeats.get(key)
        if repeats is None:
            if len(self._repeats) >= MAX_KINDS:  # messages formatted before logging: forget the quiet ones
                self._repeats = {k: r for k, r in self._repeats.items() if r.held}
            repeats = self._repeats[key] = Repeats(self.window_s)
        written = repeats.note(now)
        if written is None:
            return False
        held, since = written
        if held:
            record.msg = (
                f"{record.getMessage()} [and {held} more like it in the last {since:.0f} s, not logged]"
            )
            record.args = None
        return True

    def overdue(self) -> list[logging.LogRecord]:
        """Summaries of the repeats held back whose window has closed with no repeat since."""
        now = self.clock()
        summaries = []
        for (name, level, template), repeats in self._repeats.items():
            overdue = repeats.overdue(now)
            if overdue is not None:
                held, since = overdue
                summaries.append(
                    logging.LogRecord(
                        name,
                        level,
                        __file__,
                        0,
                        "%d more like this in the last %.0f s, not logged: %s",
                        (held, since, template),
                        None,
                    )
                )
        return summaries


class _SummarisingHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A stream handler with both filters, that writes the summaries of closed windows of repeats before
    the next record (at most once a second it looks for them)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.clock = clock
        self.repeats = RepeatsSummarised(clock=clock)
        self.addFilter(RetriedAsWarnings())
        self.addFilter(self.repeats)
        self._looked_at = 0.0

    def handle(self, record: logging.LogRecord) -> bool:
        now = self.clock()
        if now - self._looked_at >= 1.0:
            self._looked_at = now
            for summary in self.repeats.overdue():
                self.acquire()
                try:
                    self.emit(summary)
                finally:
                    self.release()
        return bool(super().handle(record))


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def configure_logging(
    *, verbose: bool = False, json_lines: bool = False, clock: Callable[[], float] = time.monotonic
) -> None:
    """One handler on stderr for the whole process (``clock``: monotonic seconds, for the summaries)."""
    handler = _SummarisingHandler(clock)
    handler.setFormatter(
        JsonFormatter()
        if json_lines
        else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    for noisy in ("aiokafka", "cassandra", "kafka"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
