"""The demo on one event loop: the workload in rounds, the events as they arrive, the REST views."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from cassandra.cluster import Session

from cdc.demo.descriptions import describe_rest, rest_path
from cdc.demo.display import Display, progress_bar
from cdc.demo.event_tail import EventTail
from cdc.demo.processes import DemoRun
from cdc.demo.report import summarize, where_to_look
from cdc.demo.tally import Tally
from cdc.demo.topics import CLEAN_TOPIC
from cdc.demo.workload import TTL_S, Workload

ROUND_TIMEOUT_S = 20.0


class Demo:
    """The workload in rounds, the tail of the clean topic and the REST views, on one event loop: writes
    run in threads, so events print the moment they arrive."""

    def __init__(self, run: DemoRun, session: Session, rows: int, rounds: int) -> None:
        assert run.worker is not None
        self.run = run
        self.worker = run.worker
        self.rounds = rounds
        self.display = Display()
        self.tally = Tally()
        self.tail = EventTail(run.kafka, self.tally, self.display)
        self.workload = Workload(session, self.tally, rows)

    def _progress(self, round_no: int, done: int, total: int) -> None:
        p50 = self.tally.percentile(0.5)
        self.display.progress(
            f"round {round_no}/{self.rounds} {progress_bar(done, total)} writes {done}/{total}"
            f" | events {sum(self.tally.ops.values())} | awaited {self.tally.waiting()}"
            + (f" | p50 {p50:.0f} ms" if p50 is not None else "")
        )

    async def _wait(self, done: Callable[[], bool], timeout_s: float, tick: Callable[[], None]) -> None:
        deadline = time.monotonic() + timeout_s
        while not done() and time.monotonic() < deadline:
            tick()
            await asyncio.sleep(0.05)
        self.display.clear()

    async def show_rest(self, row_key: tuple[str, int]) -> None:
        shown, path = rest_path(row_key)
        got: tuple[int, Any] | None = None
        for _ in range(25):  # 503 while the worker restores a partition
            got = await asyncio.to_thread(self.worker.get_json, path, 5.0)
            if got is not None and got[0] != 503:
                break
            await asyncio.sleep(0.2)
        self.display.line(f"  REST GET http://127.0.0.1:{self.worker.port}{shown}")
        for text in describe_rest(got[1] if got else None):
            self.display.line(f"       {text}")

    async def one_round(self, round_no: int) -> None:
        steps = self.workload.plan(round_no)
        kinds = Counter(step for step, _ in steps)
        self.display.line(
            f"round {round_no}/{self.rounds}: {kinds['insert']} inserts"
            + (f" and 1 with TTL {TTL_S} s" if kinds["insert_ttl"] else "")
            + f", {kinds['update']} updates, {kinds['add_tag']} tag added, {kinds['delete']} delete"
        )
        for done, (step, row) in enumerate(steps, 1):
            await self.workload.write(round_no, step, row)
            self._progress(round_no, done, len(steps))
        await self._wait(
            lambda: self.tally.waiting(round_no) == 0,
            ROUND_TIMEOUT_S,
            lambda: self._progress(round_no, len(steps), len(steps)),
        )
        if self.tally.hidden[round_no]:
            self.display.line(f"  ... and {self.tally.hidden[round_no]} more c events of round {round_no}")
        if self.tally.waiting(round_no):
            self.display.line(
                f"  {self.tally.waiting(round_no)} writes of round {round_no} have no event yet"
            )
        ttl_row = self.workload.ttl_row
        if round_no == 1 and ttl_row is not None and ttl_row.key in self.tally.ttl_created:
            await self.show_rest(ttl_row.key)
        elif updated := next((r for s, r in steps if s == "update" and not r.deleted), None):
            await self.show_rest(updated.key)

    def _settled(self) -> bool:
        """Every event arrived; or all but the TTL row's, and it expired before the worker saw it (then
        it never gives an event: a row nobody could read changes nothing)."""
        tally = self.tally
        if tally.waiting() == 0:
            return True
        ttl_writes = [w for w in tally.pending.values() if w.with_ttl]
        if len(ttl_writes) != tally.waiting() - len(tally.pending_expiries) or not ttl_writes:
            return False
        acked = ttl_writes[0].acked
        return acked is not None and time.time() > acked + TTL_S + 2

    async def main(self, keep_running: bool) -> Tally:
        await self.tail.start()
        tail_task = asyncio.create_task(self.tail.run())
        try:
            began = time.monotonic()
            self.display.line(f"\nchange events on {CLEAN_TOPIC} as they arrive (op, key, change, latency):")
            for round_no in range(1, self.rounds + 1):
                await self.one_round(round_no)
            await self._wait(
                self._settled,
                TTL_S + ROUND_TIMEOUT_S,
                lambda: self.display.progress(
                    f"waiting for the TTL row to expire ... {self.tally.waiting()} events awaited"
                ),
            )
            ttl_row = self.workload.ttl_row
            if ttl_row is not None and ttl_row.key in self.tally.ttl_created:
                self.display.line(f"the TTL row after its {TTL_S} s:")
                await self.show_rest(ttl_row.key)
            got = await asyncio.to_thread(self.worker.get_json, "/stats", 5.0)
            stats = got[1].get("total") if got and isinstance(got[1], dict) else None
            summarize(self.tally, ttl_row, time.monotonic() - began, stats if isinstance(stats, dict) else {})
            where_to_look(self.run, keep_running)
            if keep_running:
                self.tail.print_all = True
                await asyncio.Event().wait()  # until Ctrl-C
            return self.tally
        finally:
            self.display.clear()
            tail_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await tail_task
            await self.tail.consumer.stop()


async def play(run: DemoRun, session: Session, rows: int, rounds: int, keep_running: bool) -> Tally:
    return await Demo(run, session, rows, rounds).main(keep_running)  # aiokafka wants the running loop
