"""The external delivery target: a local directory that accepts deliveries under an idempotency key.

A delivery with a key already seen returns the original receipt (``replayed: true``) instead of creating
a second one; the same key with a different payload is refused. Creation is atomic (write a temporary
file, then ``link`` it into place, which fails if the key exists), so two racing deliveries of one key
produce one receipt.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fencepost.core.canonical import canonical_bytes
from fencepost.outbox.context import EnvironmentFailed


class TargetRefused(Exception):
    """The target refused the delivery: its key was used before with another payload."""


class TargetUnavailable(EnvironmentFailed):
    """The target's directory could not be written (a full disk, an I/O error, permissions): a failure of the
    machine, not of the package, so no verdict is recorded and the lease is left to expire (docs/operations.md,
    Bounds)."""


class LocalFileTarget:
    """Deliveries as JSON files in ``directory`` (created on first use)."""

    kind = "local-file"

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def deliver(self, idempotency_key: str, payload: dict[str, Any]) -> dict[str, Any]:
        """Deliver ``payload`` once per ``idempotency_key``.

        Returns:
            The target receipt: ``{"target", "receipt_id", "delivered_at", "payload_sha256", "replayed"}``.
        Raises:
            TargetRefused: key reused with another payload. TargetUnavailable: the directory cannot be written.
        """
        body = canonical_bytes(payload)
        payload_sha = hashlib.sha256(body).hexdigest()
        name = hashlib.sha256(idempotency_key.encode("utf-8")).hexdigest() + ".json"
        final = self.directory / name
        created = False
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            if not final.exists():
                fresh = {"target": self.kind, "receipt_id": "tr_" + secrets.token_hex(12),
                         "delivered_at": datetime.now(UTC).isoformat(), "payload_sha256": payload_sha}
                record = {"idempotency_key": idempotency_key, "receipt": fresh,
                          "payload": json.loads(body.decode("utf-8"))}
                tmp = self.directory / f".{name}.{secrets.token_hex(6)}.tmp"
                tmp.write_bytes(json.dumps(record, sort_keys=True).encode("utf-8"))
                with open(tmp, "rb") as fh:
                    os.fsync(fh.fileno())
                try:
                    os.link(tmp, final)
                    created = True
                except FileExistsError:
                    pass  # a concurrent delivery of the same key won; use its receipt
                finally:
                    tmp.unlink(missing_ok=True)
            stored = json.loads(final.read_text(encoding="utf-8"))
        except OSError as error:
            raise TargetUnavailable(f"target directory is not writable: {error.strerror}") from None
        receipt: dict[str, Any] = dict(stored["receipt"])
        if receipt["payload_sha256"] != payload_sha:
            raise TargetRefused("idempotency key already used with a different payload")
        receipt["replayed"] = not created
        return receipt
