"""Errors of the Spark jobs; each message names the job, table, topic or config key involved."""

from __future__ import annotations


class PipelineError(RuntimeError):
    """A Spark job cannot start or cannot go on (missing jars, unreachable service, bad input)."""


class ConnectorJarsMissing(PipelineError):
    """The Kafka connector or Delta Lake jars are not downloaded."""


class ServiceUnreachable(PipelineError):
    """Kafka or Cassandra does not answer at the configured address."""
