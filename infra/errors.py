"""Errors of the local-services layer: each says what failed, where, and what to do."""

from __future__ import annotations


class InfraError(Exception):
    """Base of every error raised while installing, starting or stopping local services."""


class ToolchainError(InfraError):
    """Java or Maven is missing or has the wrong version."""


class ArtifactDownloadError(InfraError):
    """Maven could not resolve or copy a service's jars."""


class PortInUseError(InfraError):
    """A port a service needs is already bound by another process."""


class ServiceStartError(InfraError):
    """A service exited or did not become ready in time; the message carries its last log lines."""


class SecurityMaterialError(InfraError):
    """A certificate, keystore or password file of secure mode could not be made or is unsafe to use."""
