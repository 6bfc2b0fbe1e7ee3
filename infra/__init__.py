"""Local real services (Cassandra with CDC, KRaft Kafka) installed from Maven Central and run as child JVMs."""
