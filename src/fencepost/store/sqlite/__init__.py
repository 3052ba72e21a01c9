"""SQLite control store: the embedded default."""
