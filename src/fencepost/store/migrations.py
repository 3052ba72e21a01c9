"""Loading versioned migration files shipped inside a backend package.

Files are ``migrations/NNNN_name.sql``; ``NNNN`` is the version. The checksum (SHA-256 of the bytes)
is recorded when applied, so an edited migration is detected instead of silently diverging.
"""

from __future__ import annotations

import hashlib
import re
from importlib import resources

from fencepost.store.base import MigrationStep

_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


def load_migrations(package: str) -> list[MigrationStep]:
    """Return the migrations of ``package`` (e.g. ``fencepost.store.sqlite``) in version order.

    Raises:
        ValueError: a gap or duplicate in the version sequence.
    """
    folder = resources.files(package).joinpath("migrations")
    steps = []
    for entry in folder.iterdir():
        match = _FILE.match(entry.name)
        if not match:
            continue
        data = entry.read_bytes()
        steps.append(MigrationStep(version=int(match.group(1)), name=match.group(2),
                                   sql=data.decode("utf-8"), checksum=hashlib.sha256(data).hexdigest()))
    steps.sort(key=lambda s: s.version)
    for expected, step in enumerate(steps, start=1):
        if step.version != expected:
            raise ValueError(f"migration versions of {package} must run 1..N without gaps; found {step.version}")
    return steps
