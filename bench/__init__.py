"""fencepost benchmark suite: run with `bash bench/run` (see docs/benchmarks.md)."""
