"""The agent's HTTP endpoints: `/health` (JSON, 503 when stalled) and Prometheus `/metrics`."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from aiohttp import web

from agents.metrics import AgentMetrics


class HealthServer:
    def __init__(
        self, bind: str, port: int, metrics: AgentMetrics, health: Callable[[], dict[str, Any]]
    ) -> None:
        self.bind = bind
        self.port = port
        self.metrics = metrics
        self.health = health
        self._runner: web.AppRunner | None = None

    async def start(self) -> int:
        """Serve; returns the bound port (useful with port 0)."""
        app = web.Application()
        app.router.add_get("/health", self._health)
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.bind, self.port)
        await site.start()
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        return sockets[0].getsockname()[1] if sockets else self.port

    async def _health(self, request: web.Request) -> web.Response:
        body = self.health()
        status = 200 if body.get("status") == "ok" else 503
        return web.Response(status=status, text=json.dumps(body), content_type="application/json")

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=self.metrics.render(), headers={"Content-Type": "text/plain; version=0.0.4"})

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
