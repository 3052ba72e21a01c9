"""The drift check: does a target hold what the published lock says it may hold before a delivery starts?
(ADR 0056.) Pure: given the target's ledger rows of the package, its schema objects and the lock.

A difference is a conflict that names itself and changes nothing:

- the target's ledger has a migration the package does not (the target is ahead of the package, or another
  package's history was written under this name);
- a migration of the same name with a different checksum (migrated outside fencepost, or a changed script);
- a migration applied while an earlier one is missing (a gap the package order does not allow);
- an unfenced migration ``started`` by another delivery and never marked applied, while that delivery is not
  resolved by an operator (resolve it first; a resolution settles the row: ``succeeded`` counts it applied,
  ``failed`` as never started, and the migration step then writes the ledger to match, ADR 0103);
- schema objects on a target whose ledger has no row of the package (tables present without ledger rows: the
  target was migrated by hand or holds another schema; this check assumes one package per target database).

Otherwise the start state says where the delivery begins: ``fresh`` (nothing applied), ``previous_version``
(exactly the previous version's migrations: an upgrade), ``complete`` (all applied: a no-op re-delivery) or
``partial`` (a prefix, left by an interrupted delivery).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fencepost.delivery.lock import LockedMigration
from fencepost.delivery.target_db import LedgerRow


@dataclass(frozen=True)
class DriftCheck:
    """The outcome: ``differences`` empty means no drift; ``start_state`` and ``applied`` say where it begins."""

    differences: list[str] = field(default_factory=list)
    start_state: str = "fresh"
    applied: list[str] = field(default_factory=list)

    @property
    def drifted(self) -> bool:
        return bool(self.differences)

    def as_json(self) -> dict[str, Any]:
        return {"drift": self.differences, "start_state": self.start_state, "applied_before": self.applied}


@dataclass(frozen=True)
class StartedBy:
    """Who left a ``started`` ledger row: the adapter invocation's action ``invocation_id`` (None when the control
    store does not know it) and the operator's resolution of it (``"succeeded"``, ``"failed"``, or None)."""

    invocation_id: str | None
    resolved: str | None = None


def check_drift(migrations: Sequence[LockedMigration], ledger: Sequence[LedgerRow], objects: Sequence[str], *,
                previous_through: int | None, own_ids: frozenset[str] = frozenset(),
                started_by: Mapping[str, StartedBy] | None = None) -> DriftCheck:
    """Compare a target's ledger rows (of this package) and schema objects with the lock.

    Args:
        migrations: the lock's migrations in order. ledger: the target's rows of this package.
        objects: the target's schema objects (``"table t"``), ledgers left out. previous_through: how many
            migrations the previous version shipped, or None. own_ids: this delivery's adapter invocation ids
            (a ``started`` row of its own is the step's to settle, not drift). started_by: for the adapter
            invocation ids of other ``started`` rows, their invocation and its resolution (ADR 0103).
    Returns:
        ``DriftCheck``; its differences name each conflict in one sentence.
    """
    by_id = {m.id: m for m in migrations}
    order = [m.id for m in migrations]
    differences: list[str] = []
    present: set[str] = set()
    for row in ledger:
        wanted = by_id.get(row.migration)
        if wanted is None:
            differences.append(f"the target has migration {row.migration} (version {row.version}) that this "
                               "package does not have: the target is ahead of the package")
            continue
        if row.checksum != wanted.checksum:
            differences.append(f"migration {row.migration}: the target's ledger has checksum {row.checksum} "
                               f"(version {row.version}), the package has {wanted.checksum}: migrated outside "
                               "fencepost or changed after it was delivered")
            continue
        if row.state == "started" and row.adapter_invocation_id not in own_ids:
            by = (started_by or {}).get(row.adapter_invocation_id, StartedBy(None))
            if by.resolved == "succeeded":  # the operator found it applied: so it counts
                present.add(row.migration)
                continue
            if by.resolved == "failed":  # the operator found it not applied: as if never started
                continue
            then = (f"resolve its delivery {by.invocation_id} (`fencepost host queue` says what to look at) and "
                    "deliver again" if by.invocation_id else "reconcile that delivery")
            differences.append(f"migration {row.migration} was started unfenced by adapter invocation "
                               f"{row.adapter_invocation_id} and never marked applied: {then}")
            continue
        present.add(row.migration)
    applied = [mid for mid in order if mid in present]
    prefix = order[:len(applied)]
    if applied != prefix:
        missing = next(mid for mid in prefix if mid not in present)
        differences.append(f"migration {missing} is missing on the target while later ones are applied "
                           f"({', '.join(m for m in applied if order.index(m) > order.index(missing))})")
    if not ledger and objects:
        shown = ", ".join(objects[:10]) + (f" and {len(objects) - 10} more" if len(objects) > 10 else "")
        differences.append(f"tables present without ledger rows: {shown} (the target was migrated outside "
                           "fencepost or holds another schema)")
    if len(applied) == 0:
        state = "fresh"
    elif len(applied) == len(order):
        state = "complete"
    elif previous_through is not None and len(applied) == previous_through:
        state = "previous_version"
    else:
        state = "partial"
    return DriftCheck(differences, state, applied)
