"""Waiting that ends early when the agent is asked to stop."""

from __future__ import annotations

import asyncio
import contextlib


async def wait_or_stop(stopping: asyncio.Event, seconds: float) -> bool:
    """Sleep up to `seconds`; True as soon as `stopping` is set."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stopping.wait(), seconds)
    return stopping.is_set()
