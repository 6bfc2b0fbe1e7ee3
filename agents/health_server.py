"""The agent's HTTP endpoints: `/health` (JSON), Prometheus `/metrics`, and the gaps it found in cdc_raw.

`/health` answers 503 while starting or stalled, and 200 when ok or degraded, with `problems` saying why
unless ok: a degraded agent (it found CDC data Cassandra deleted before it was read, or Kafka is not
taking its records: `kafka_connected` false, and its pass over cdc_raw may wait for room in flight) keeps
going, so a liveness probe must not restart it; a restart would bring back neither the data nor Kafka.
Stalled is a pass over cdc_raw that has not finished for a while with Kafka taking records. `GET /gaps` lists the gaps not yet acknowledged, and
`POST /gaps/acknowledge` acknowledges them all (the health is ok again; the records stay on the gap topic).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from aiohttp import web

from agents.metrics import AgentMetrics

#: /health statuses answered with 200
SERVING = frozenset({"ok", "degraded"})


class HealthServer:
    def __init__(
        self,
        bind: str,
        port: int,
        metrics: AgentMetrics,
        health: Callable[[], dict[str, Any]],
        *,
        gaps: Callable[[], list[dict[str, Any]]] = list,
        acknowledge_gaps: Callable[[], list[str]] = list,
    ) -> None:
        self.bind = bind
        self.port = port
        self.metrics = metrics
        self.health = health
        self.gaps = gaps
        self.acknowledge_gaps = acknowledge_gaps
        self._runner: web.AppRunner | None = None

    async def start(self) -> int:
        """Serve; returns the bound port (useful with port 0)."""
        app = web.Application()
        app.router.add_get("/health", self._health)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/gaps", self._gaps)
        app.router.add_post("/gaps/acknowledge", self._acknowledge)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.bind, self.port)
        await site.start()
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        return sockets[0].getsockname()[1] if sockets else self.port

    async def _health(self, request: web.Request) -> web.Response:
        body = self.health()
        status = 200 if body.get("status") in SERVING else 503
        return web.json_response(body, status=status, dumps=json.dumps)

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=self.metrics.render(), headers={"Content-Type": "text/plain; version=0.0.4"})

    async def _gaps(self, request: web.Request) -> web.Response:
        return web.json_response({"gaps": self.gaps()})

    async def _acknowledge(self, request: web.Request) -> web.Response:
        return web.json_response({"acknowledged": self.acknowledge_gaps()})

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
