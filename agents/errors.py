"""Errors of the node agent (the decoder's own errors live in agents.commitlog.errors)."""

from __future__ import annotations


class AgentError(Exception):
    """Base of every error the agent raises."""


class OffsetStoreError(AgentError):
    """The offsets file is unreadable, or an offset would move backwards."""
