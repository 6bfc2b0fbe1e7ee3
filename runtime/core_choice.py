"""Which per-record core a process runs, as ``agent.core`` and ``worker.core`` choose it: one rule and one
way of saying it for the agent and the worker.

``native`` is the Rust extension (`cdc_native`, built by `make setup`), ``python`` the code that is its
specification; ``auto`` takes the native core where it is installed. Asking for ``native`` where it is not
installed is a configuration error, so a deployment that counts on its speed never runs slower unnoticed.
"""

from __future__ import annotations

from runtime.config import ConfigError


def choose_core(requested: str, *, installed: bool, key: str, source: object) -> str:
    """``native`` or ``python`` for configured ``requested`` (auto, native, python) of config key ``key``
    in config ``source``; raises ConfigError when native is asked for and not installed."""
    if requested == "python":
        return "python"
    if requested == "native" and not installed:
        raise ConfigError(
            f"config {source}: {key} is native but the native core (cdc_native) is not installed: build it "
            "with `make setup` (needs a Rust toolchain; scripts/install-system-deps.sh installs one), or set "
            f"{key}: auto to run on the Python core"
        )
    return "native" if installed else "python"


def core_description(core: str, *, installed: bool, key: str) -> str:
    """The start-up log's words for the core that runs, and why it is the Python one when it is."""
    if core == "native":
        return "native core"
    why = f"turned off by {key}" if installed else "not installed"
    return f"Python core (slower: the native core is {why})"
