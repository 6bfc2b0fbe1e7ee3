"""`cdc verify`: a seeded workload against a real cluster, compared end to end with the clean topics."""
