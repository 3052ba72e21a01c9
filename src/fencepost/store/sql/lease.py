"""The lease condition primitive for child rows written under a lease (ADR 0015).

A query embeds ``{{lease_held}}`` (a per-dialect fragment of ``outbox.sql``) in its WHERE clause and is run
with ``lease_params(lease)``: the write touches nothing unless ``lease`` is still its command's current
lease. On PostgreSQL the condition also share-locks the command row until COMMIT, so no takeover can claim
the command between the write and the unit's fence.
"""

from __future__ import annotations

from typing import Any

from fencepost.store.records import Lease
from fencepost.store.sql.executor import Statements


def lease_params(lease: Lease) -> dict[str, Any]:
    """The parameters of the ``{{lease_held}}`` condition for ``lease``."""
    return {"lease_command_id": lease.command_id, "lease_token": lease.token}


def lease_held(unit: Statements, lease: Lease) -> bool:
    """Whether ``lease`` is its command's current lease, checked by the store now (``lease_check``)."""
    return bool(unit.run("lease_check", lease_params(lease)).rows)
