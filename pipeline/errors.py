"""Errors of the Spark jobs; each message names the job, table, topic or config key involved."""

from __future__ import annotations

import re

#: the qualified class name Python's traceback puts before the message of one of these errors
_OUR_ERROR = re.compile(r"^pipeline\.errors\.\w+: ")


class PipelineError(RuntimeError):
    """A Spark job cannot start or cannot go on (missing jars, unreachable service, bad input)."""


class ConnectorJarsMissing(PipelineError):
    """The Kafka connector or Delta Lake jars are not downloaded."""


class ServiceUnreachable(PipelineError):
    """Kafka or Cassandra does not answer at the configured address."""


def spark_failure_line(exc: BaseException) -> str:
    """The useful line of an error from Spark (py4j wraps a task's error in a long Java trace): the last
    error our Python code raised in a task, else the root cause of the Java exception, else the first line."""
    text = str(exc)
    lines = [
        line.strip()
        for line in text.splitlines()
        if line.strip() and not line.lstrip().startswith(("at ", "... "))
    ]
    for line in reversed(lines):
        if "Error:" in line and "py4j" not in line:
            return _OUR_ERROR.sub("", line)
    causes = [line.removeprefix("Caused by: ") for line in lines if line.startswith("Caused by: ")]
    if causes:
        return causes[-1]
    return lines[0] if lines else type(exc).__name__
