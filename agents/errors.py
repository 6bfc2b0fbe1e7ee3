"""Errors of the node agent (the decoder's own errors live in agents.commitlog.errors)."""

from __future__ import annotations

#: consecutive refusals for a reason the config can fix (credentials, TLS) before the agent stops with
#: AccessError; fewer could be a service in the middle of a restart
ACCESS_REFUSALS_BEFORE_EXIT = 3


class AgentError(Exception):
    """Base of every error the agent raises."""


class OffsetStoreError(AgentError):
    """The offsets file is unreadable, or an offset would move backwards."""


class LedgerError(AgentError):
    """The cdc_raw ledger (what the agent saw of cdc_raw, see agents.segment_ledger) is unreadable."""


class AccessError(AgentError):
    """Kafka or Cassandra refuses the agent for a reason only its config can fix: wrong password or unknown
    user, an untrusted or expired certificate, TLS on one side only, a key file that does not load. The
    message names the config key and holds no secret. Raised before anything is read from cdc_raw, so
    nothing is lost: after the fix, a restart reads from the saved offsets."""
