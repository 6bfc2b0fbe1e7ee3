"""Whether the worker's Kafka answers and takes its commits: for `/health`, the lag figures and the logs.

Two things are followed, each with the moment it went wrong:

- **reachable**: a metadata request every few seconds (runtime/kafka_probe.py) answered or not. It tells an
  idle worker's Kafka outage too, when nothing is committed;
- **commits**: whether the last transaction of a batch, an expiry or a heartbeat committed. A batch that
  cannot commit is retried for ``worker.outage_timeout_s``, then the worker stops (app/batch_loop.py).

An outage is told in a few lines rather than one per failed attempt: a WARNING when it starts (what
failed, and until when the worker retries), one every SUMMARY_EVERY_S while it lasts (attempts so far,
the latest error), and an INFO line when Kafka answers and commits again (how long it was away). The
Kafka client's own reconnect errors are summarised by runtime.logs.

Pure bookkeeping: the caller says what happened, and when (monotonic seconds).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

log = logging.getLogger(__name__)

#: how often a lasting outage is summarised in the log
SUMMARY_EVERY_S = 30.0


@dataclass(slots=True)
class _Trouble:
    """One thing going wrong: since when, how often, the latest error, and when it was last logged."""

    since: float
    wall_since: float
    attempts: int
    latest: str
    logged_at: float


class KafkaStatus:
    """What the worker knows of its Kafka (``bootstrap`` for the messages)."""

    def __init__(self, bootstrap: str, outage_timeout_s: float) -> None:
        self.bootstrap = bootstrap
        self.outage_timeout_s = outage_timeout_s
        self._unreachable: _Trouble | None = None
        self._failing: _Trouble | None = None

    # -- the probe

    def answered(self, now: float) -> None:
        trouble, self._unreachable = self._unreachable, None
        if trouble is not None:
            log.info(
                "Kafka at %s answers again after %.0f s (%d probes failed; the client's connection errors "
                "meanwhile are summarised above)",
                self.bootstrap, now - trouble.since, trouble.attempts,
            )  # fmt: skip

    def did_not_answer(self, error: BaseException, now: float) -> None:
        trouble = self._unreachable
        if trouble is None:
            self._unreachable = _Trouble(now, time.time(), 1, repr(error), now)
            log.warning(
                "Kafka at %s does not answer (%r): the worker's lag is unknown until it does",
                self.bootstrap, error,
            )  # fmt: skip
            return
        trouble.attempts += 1
        trouble.latest = repr(error)
        if now - trouble.logged_at >= SUMMARY_EVERY_S:
            trouble.logged_at = now
            log.warning(
                "Kafka at %s has not answered for %.0f s (%d probes; latest: %s)",
                self.bootstrap, now - trouble.since, trouble.attempts, trouble.latest,
            )  # fmt: skip

    @property
    def reachable(self) -> bool:
        return self._unreachable is None

    # -- commits

    def commit_failed(self, what: str, error: BaseException, now: float) -> float:
        """A transaction (of a batch, an expiry, a heartbeat) did not commit; seconds since the first
        failure of this outage."""
        trouble = self._failing
        if trouble is None:
            self._failing = _Trouble(now, time.time(), 1, f"{what}: {error!r}", now)
            log.warning(
                "Kafka does not take the worker's commits (%s: %s); batches are retried for up to %.0f s "
                "(worker.outage_timeout_s), then the worker stops",
                what, error, self.outage_timeout_s,
            )  # fmt: skip
            return 0.0
        trouble.attempts += 1
        trouble.latest = f"{what}: {error!r}"
        if now - trouble.logged_at >= SUMMARY_EVERY_S:
            trouble.logged_at = now
            log.warning(
                "no commit for %.0f s (%d failed attempts; latest %s); retrying",
                now - trouble.since, trouble.attempts, trouble.latest,
            )  # fmt: skip
        return now - trouble.since

    def committed(self, now: float) -> None:
        trouble, self._failing = self._failing, None
        if trouble is not None:
            log.info(
                "Kafka takes the worker's commits again after %.0f s (%d failed attempts)",
                now - trouble.since, trouble.attempts,
            )  # fmt: skip

    @property
    def committing(self) -> bool:
        return self._failing is None

    # -- /health

    def problems(self, now: float) -> list[str]:
        """What is wrong now, one sentence each (none: Kafka answers and takes commits)."""
        found = []
        if (trouble := self._unreachable) is not None:
            found.append(
                f"Kafka at {self.bootstrap} has not answered since {_clock(trouble.wall_since)} "
                f"({now - trouble.since:.0f} s; latest: {trouble.latest})"
            )
        if (trouble := self._failing) is not None:
            found.append(
                f"no transaction has committed since {_clock(trouble.wall_since)} ({now - trouble.since:.0f} s, "
                f"{trouble.attempts} failed attempts; latest {trouble.latest}); a batch is retried for "
                f"{self.outage_timeout_s:.0f} s (worker.outage_timeout_s), then the worker stops"
            )
        return found


def _clock(wall: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(wall))
