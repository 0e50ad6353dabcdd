"""The `bkfast` command line."""
