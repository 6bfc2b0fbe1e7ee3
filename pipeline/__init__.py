"""PySpark jobs: clean topics into lake tables, bootstrap, batch replay, reconcile."""
