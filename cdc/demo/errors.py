"""The demo's one error: what stops it, with where to look."""

from __future__ import annotations

from infra.errors import ServiceStartError


class DemoError(ServiceStartError):
    """The demo cannot run or its pipeline did not come up; the message says where to look."""
