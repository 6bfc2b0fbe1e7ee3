"""`cdc demo`: the whole pipeline on real local services, as a newcomer first sees it.

Starts Kafka and Cassandra (when they are not running), one node agent per Cassandra node and one worker
as child processes, creates `demo.readings WITH cdc = true` and writes a small workload in rounds:
inserts, updates, a collection change, a delete and a row with a short TTL. Meanwhile it tails the clean
topic with a read_committed consumer, as a downstream service would, and prints every change event as it
arrives (before -> after, write-to-event latency), and after each round one row as the worker's REST
endpoint serves it.

Every run starts from a clean slate that earlier runs cannot disturb: the demo's topics are recreated,
the worker starts from an empty state folder with a consumer group of its own, and demo processes a
killed run left behind are stopped. The agents keep their offsets: those describe the nodes' `cdc_raw`
folders, not the run, and keep an agent from publishing what an earlier run already captured.

`command.run_demo` is what `cdc demo` runs; `play` drives the rounds on one event loop.
"""
