"""In-process integration tests: a real SQLite control store, a real worker and real sandboxes."""
