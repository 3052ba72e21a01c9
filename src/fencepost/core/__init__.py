"""Pure building blocks: canonical JSON, fingerprints, ids, clocks and errors. No I/O."""
