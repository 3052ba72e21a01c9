"""Fast in-process unit tests: pure functions and records built directly, no database."""
