"""JobPhases: the one line that says where a pipeline job's wall time went."""

from __future__ import annotations

import re
import time

import pytest

from pipeline.job_phases import JobPhases, process_age_s


def test_phases_add_up_in_the_order_they_first_ran() -> None:
    phases = JobPhases("lake", before_s=None)
    with phases.timed("Spark session"):
        time.sleep(0.05)
    phases.add("micro-batches", 1.25)
    phases.add("micro-batches", 0.5)
    line = phases.line()
    assert line.startswith("lake: ")
    assert re.search(r"Spark session 0\.[01] s, micro-batches 1\.8 s, other \d+\.\d s$", line), line
    assert phases.phases["micro-batches"] == pytest.approx(1.75)


def test_a_failed_step_still_counts() -> None:
    phases = JobPhases("bootstrap", before_s=None)
    with pytest.raises(RuntimeError), phases.timed("Cassandra check"):
        time.sleep(0.02)
        raise RuntimeError("refused")
    assert phases.phases["Cassandra check"] >= 0.02


def test_the_start_up_before_the_job_is_part_of_the_total() -> None:
    phases = JobPhases("bootstrap", before_s=3.0)
    phases.add("Spark session", 2.0)
    total = float(phases.line().split(": ", 2)[1].removesuffix(" s"))
    assert total >= 3.0  # start-up, and the time since the job began (the session is within it)
    assert "Python start-up and imports 3.0 s" in phases.line()


def test_this_process_has_an_age() -> None:
    age = process_age_s()
    assert age is not None and 0 < age < 24 * 3600
