"""`pipeline.pinned_frame`: a frame computed once, read many times, and its blocks dropped at the end."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql import functions as F

from pipeline.pinned_frame import pinned


def _persistent_rdds(spark: Any) -> set[int]:
    return {int(k) for k in spark.sparkContext._jsc.getPersistentRDDs().keySet()}


def test_a_pinned_frame_is_computed_once_and_its_blocks_are_dropped_when_the_block_ends(spark: Any) -> None:
    # a new UUID on every evaluation (``rand`` would not do: its seed is fixed when the frame is made)
    source = spark.range(2000).select("id", F.expr("reflect('java.util.UUID', 'randomUUID')").alias("draw"))
    assert source.collect() != source.collect(), "the source must change between reads for this test"
    before = _persistent_rdds(spark)
    with pinned(source) as frame:
        held = _persistent_rdds(spark) - before
        first = sorted(frame.collect())
        assert sorted(frame.collect()) == first, "a second read of the pinned frame computed it again"
        assert frame.where("draw < '8'").count() == sum(1 for r in first if r.draw < "8")
        assert len(held) == 1, f"the pinned frame holds {len(held)} RDDs, expected its checkpoint"
    assert _persistent_rdds(spark) & held == set(), "the checkpoint's blocks outlived the block"


def test_a_pinned_frame_is_dropped_when_the_block_fails(spark: Any) -> None:
    before = _persistent_rdds(spark)
    with pytest.raises(ZeroDivisionError), pinned(spark.range(10)) as frame:
        assert frame.count() == 10
        assert _persistent_rdds(spark) - before
        raise ZeroDivisionError
    assert _persistent_rdds(spark) - before == set()
