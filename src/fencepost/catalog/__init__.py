"""The package catalog: what a plugin package is and what has been published and installed.

Below rehearsal, workflows and the host (ADR 0015): the manifest format and its validation (``manifest``),
workflow definitions (``definitions``), publication and lock digests (``digests``), and the lifecycle of
publications, the head, installations, dispositions and quarantines (``lifecycle``).
"""
