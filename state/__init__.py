"""RocksDB-backed row-image state shared by the Faust workers and the Spark replay job."""
