"""fencepost: durable, fenced execution of side-effecting work.

Layers (see ``docs/architecture.md``), dependencies pointing down only:
``core`` -> ``store`` -> ``outbox`` -> ``evidence`` -> ``rehearsal`` -> ``cli``.
"""

__version__ = "0.1.0"
