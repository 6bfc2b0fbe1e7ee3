"""The `cdc` command line."""
