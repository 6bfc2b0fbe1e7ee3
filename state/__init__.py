"""Row-image state shared by the Faust workers and the Spark replay job.

The merge core here is pure (no I/O): ``PartitionState.apply`` merges raw events by Cassandra's rules,
``row_image``/``partition_images`` say what a SELECT would show at a given time, and ``change`` turns
images before and after into change events. Storage (RocksDB) wraps these later.
"""

from state.cell_merge import Cell, Deletion, Liveness
from state.change import RowChange, apply_with_changes, diff, expiry_changes, next_expiry
from state.errors import CounterContextError, StateError
from state.partition_state import ApplyResult, PartitionState
from state.row_image import RowImage, cell_metadata, decode_row, partition_images, primary_key, row_image
from state.table_layout import clustering_key

__all__ = [
    "ApplyResult",
    "Cell",
    "CounterContextError",
    "Deletion",
    "Liveness",
    "PartitionState",
    "RowChange",
    "RowImage",
    "StateError",
    "apply_with_changes",
    "cell_metadata",
    "clustering_key",
    "decode_row",
    "diff",
    "expiry_changes",
    "next_expiry",
    "partition_images",
    "primary_key",
    "row_image",
]
