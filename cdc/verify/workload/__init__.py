"""The seeded, randomized CQL workload `cdc verify` drives through several concurrent clients.

Pure and deterministic: the same keyspace, seed, base time and operation count give the same statements,
so a failing run can be replayed. It aims at what a CDC pipeline gets wrong: every CQL type and mutation
kind, cells written twice at one timestamp (Cassandra breaks the tie by the greater value bytes, and a
tombstone or expiring cell beats a live one), writes older than what they overlap (they must lose), TTLs
that run out while the pipeline watches, range tombstones with inclusive and exclusive bounds over an ASC
and a DESC clustering column, static and complex (collection, UDT) columns, batches, LWT, counters, and a
column added and another dropped between phases.

`seeded_workload.Workload` is the entry point; `operation` holds what the clients run, `random_values` the
values and how they render, `schema` the tables, `statement` and `statement_builder` one statement of each
kind, `operation_generator` the stream of operations (timestamps, TTLs, collisions, batches, LWT, counters).
"""
