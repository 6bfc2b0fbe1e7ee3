"""Node agents: read Cassandra commit-log segments from cdc_raw and publish raw mutation events."""
