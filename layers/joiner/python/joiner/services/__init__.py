"""Use cases the Lambda handlers and the CLI call: one service function per entry point."""
