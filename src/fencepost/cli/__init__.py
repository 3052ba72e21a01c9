"""The ``fencepost`` command line (typer)."""
