"""The keys every `cdc segment dump` object must carry, as the reader issue states them.

Written out here, apart from the renderer, so a test fails if the renderer drops one.
"""

UPDATE_KEYS = frozenset(
    {"keyspace", "table", "table_id", "partition_key", "digest", "position", "partition_deletion", "static",
     "rows", "range_tombstones"}
)  # fmt: skip
ROW_KEYS = frozenset({"clustering", "liveness", "deletion", "cells"})
CELL_KEYS = frozenset(
    {"column", "path", "timestamp", "ttl", "local_deletion_time", "tombstone", "value", "raw"}
)
