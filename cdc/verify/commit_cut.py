"""The `commit_cut` fault: the workers' connections to the broker cut right after one of them sends the
commit of a transaction (EndTxn), so it never learns the outcome of a commit the broker may have made.

The workers of a run with this fault reach Kafka only through a KafkaProxy (runtime/kafka_proxy.py), which
runs here on a thread of its own with its own event loop: the verifier's faults and clients are threads.
The proxy reads Kafka's frames, so it cannot stand in front of a TLS listener: a secured run leaves the
fault out (``available``).
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import TimeoutError as FutureTimeout

from runtime.kafka_proxy import END_TXN, KafkaProxy


def available(secure: bool) -> bool:
    """Whether a run can cut commits: only when Kafka speaks plaintext to the proxy."""
    return not secure


class CommitCutter:
    """A KafkaProxy in front of ``upstream`` on a thread of its own; give the workers ``bootstrap``."""

    def __init__(self, upstream: str) -> None:
        self.proxy = KafkaProxy(upstream)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="commit-cut-proxy", daemon=True)

    @property
    def bootstrap(self) -> str:
        return self.proxy.bootstrap

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.proxy.start(), self._loop).result(timeout=10)

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        try:
            asyncio.run_coroutine_threadsafe(self.proxy.stop(), self._loop).result(timeout=15)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=15)
            if not self._thread.is_alive():
                self._loop.close()

    def cut_after_commit(self, refuse_s: float, wait_s: float) -> bool:
        """Arm the cut for the next EndTxn and wait up to ``wait_s`` for it: True when it happened (every
        connection cut, new ones refused for ``refuse_s``), False when no worker committed meanwhile (the
        cut is withdrawn)."""

        async def cut() -> bool:
            fired = self.proxy.cut_after(END_TXN, refuse_s=refuse_s)
            try:
                await asyncio.wait_for(fired.wait(), wait_s)
                return True
            except TimeoutError:
                return not self.proxy.disarm(fired)

        try:
            return asyncio.run_coroutine_threadsafe(cut(), self._loop).result(timeout=wait_s + 10)
        except FutureTimeout:
            return False
