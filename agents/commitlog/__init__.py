"""Pure commit-log decoding: segment framing, mutation bodies, CQL values. No network, no Kafka."""
