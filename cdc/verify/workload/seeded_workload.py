"""The schema and the phases of operations of one seeded `cdc verify` run: what the runner drives."""

from __future__ import annotations

import re

from cdc.verify.workload.operation import Phase
from cdc.verify.workload.operation_generator import OperationGenerator
from cdc.verify.workload.schema import ADDED_COLUMN, DROPPED_COLUMN, TABLES, create_statements

_KEYSPACE = re.compile(r"[a-z][a-z0-9_]{0,47}")
#: the final stretch, where every statement that may carry a TTL gets the longest: a share of the
#: operations, at least FINAL_STRETCH_MIN of them (none in a run shorter than FINAL_STRETCH_MIN * 5)
FINAL_STRETCH_SHARE = 0.02
FINAL_STRETCH_MIN = 20


class Workload:
    """The schema and the operations of one seeded run. Use a fresh keyspace for every run: the tables are
    created with the column the run drops and without the one it adds."""

    def __init__(
        self,
        keyspace: str,
        seed: int,
        *,
        replication_factor: int = 3,
        base_time_us: int,
        ttl_range_s: tuple[int, int] = (3, 30),
    ) -> None:
        if not _KEYSPACE.fullmatch(keyspace):
            raise ValueError(
                f"keyspace {keyspace!r}: use 1-48 lowercase letters, digits or _, starting with a letter"
            )
        if not 1 <= ttl_range_s[0] <= ttl_range_s[1]:
            raise ValueError(f"ttl_range_s {ttl_range_s}: need 1 <= low <= high")
        self.keyspace = keyspace
        self.seed = seed
        self.replication_factor = replication_factor
        self.base_time_us = base_time_us
        self.ttl_range_s = ttl_range_s

    def tables(self) -> list[str]:
        return list(TABLES)

    def setup_statements(self) -> list[str]:
        return create_statements(self.keyspace, self.replication_factor)

    def phases(self, operations: int) -> list[Phase]:
        """Three phases of about a third of the operations each: kv gains a column after the first (later
        operations write it) and loses another after the second (later operations never write it). The
        last operations of the third make a phase of their own, the final stretch: it runs once the faults
        are over, and each of its statements that may carry a TTL gets the longest, so that live TTL data
        is there to compare when the workload ends."""
        generator = OperationGenerator(self.keyspace, self.seed, self.base_time_us, self.ttl_range_s)
        first, second = operations // 3, 2 * operations // 3
        phase1 = [generator.operation(i) for i in range(first)]
        generator.column_added()
        phase2 = [generator.operation(i) for i in range(first, second)]
        generator.column_dropped()
        stretch = max(FINAL_STRETCH_MIN, int(operations * FINAL_STRETCH_SHARE))
        stretch_from = operations - stretch if operations >= FINAL_STRETCH_MIN * 5 else operations
        phase3 = [generator.operation(i) for i in range(second, stretch_from)]
        generator.long_ttls = True
        final = [generator.operation(i) for i in range(stretch_from, operations)]
        return [
            Phase(phase1, [f"ALTER TABLE {self.keyspace}.kv ADD {ADDED_COLUMN[0]} {ADDED_COLUMN[1]}"]),
            Phase(phase2, [f"ALTER TABLE {self.keyspace}.kv DROP {DROPPED_COLUMN}"]),
            Phase(phase3, []),
            *([Phase(final, [], after_faults=True)] if final else []),
        ]
