"""The `joiner` command line."""
