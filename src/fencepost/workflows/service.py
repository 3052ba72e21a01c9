"""What the CLI and the API call for workflows: build a plan, admit it, show an admission."""

from __future__ import annotations

import dataclasses
import secrets
from typing import Any

from fencepost.core.errors import InvalidInput, NotFound
from fencepost.store.base import Store
from fencepost.store.delivery_records import TargetRecord
from fencepost.store.ports import UnitOfWork
from fencepost.workflows.admission import AdmissionResult, admit
from fencepost.workflows.plan import PLAN_FORMAT, normalize_plan


class WorkflowService:
    """Planning, admission and inspection of workflow Runs over one control store."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def plan(self, package: str, workflow_id: str, *, plan_id: str | None = None,
             inputs: dict[str, Any] | None = None, target: str | None = None) -> dict[str, Any]:
        """Build a normalized plan for one run of ``workflow_id`` against the current installation.

        Args:
            target: the live delivery target (by name) whose database the Run's tasks run on. None: the one
                live target the installed version was delivered to; no target when it was delivered to none
                (ADR 0073).
        Returns:
            The normalized plan (with its digest), ready for ``admit``.
        Raises:
            NotFound: package not installed, workflow or target unknown. InvalidInput: no target named and the
            version was delivered to several.
        """

        def unit(tx: UnitOfWork) -> dict[str, Any]:
            installation = tx.catalog.get_installation(package)
            if installation is None:
                raise NotFound(f"{package} is not installed")
            pub = tx.catalog.get_publication(installation.publication_id)
            assert pub is not None
            workflow = pub.definition.get("workflows", {}).get(workflow_id)
            if workflow is None:
                known = ", ".join(sorted(pub.definition.get("workflows", {}))) or "none"
                raise NotFound(f"{package} {pub.version} has no workflow {workflow_id!r} (known: {known})")
            tasks = pub.definition.get("tasks", {})
            chosen = _target(tx, package, pub.id, target)
            return {
                "format": PLAN_FORMAT, "plan_id": plan_id or f"plan_{secrets.token_hex(12)}", "package": package,
                "publication_id": pub.id, "installation_id": installation.id, "lock": installation.lock_digest,
                "workflow_id": workflow_id, "workflow_digest": workflow["digest"], "inputs": inputs or {},
                "steps": [{"key": s["key"], "task": s["task"], "task_digest": tasks[s["task"]]["digest"],
                           "needs": s["needs"]} for s in workflow["steps"]],
                **({} if chosen is None else {"target_id": chosen.id}),
            }

        return normalize_plan(self.store.read(unit)).data

    def admit(self, plan: Any) -> AdmissionResult:
        """Admit a plan atomically (``fencepost.workflows.admission.admit``)."""
        return admit(self.store, plan)

    def show(self, ident: str) -> dict[str, Any]:
        """An admission by plan id or run id: ``{"admission": AdmissionRow, "rows": {table: [row dicts]}}``.

        Raises:
            NotFound: no admission has that plan id or run id.
        """

        def unit(tx: UnitOfWork) -> dict[str, Any]:
            admission = tx.admission.get(ident) or tx.admission.get_by_run(ident)
            if admission is None:
                raise NotFound(f"no workflow admission or run {ident}")
            stored = tx.admission.stored(admission.plan_id, admission.run_id)
            tables = (stored.steps, stored.run, stored.step_runs, stored.events, stored.mutations, stored.receipts)
            rows = {records[0].table: [dataclasses.asdict(r) for r in records] for records in tables if records}
            return {"admission": admission, "rows": rows}

        return self.store.read(unit)


def _target(tx: UnitOfWork, package: str, publication_id: str, name: str | None) -> TargetRecord | None:
    """The named live target, else the only live target ``publication_id`` was delivered to, else None when it
    was delivered to none (a plan without a target is admitted, but its steps cannot start)."""
    if name is not None:
        found = tx.delivery.get_live_target(name)
        if found is None:
            raise NotFound(f"no live delivery target {name} (add one with fencepost target add)")
        return found
    delivered = {s.target_id for s in tx.delivery.list_delivery_starts(package) if s.publication_id == publication_id}
    live = [t for t in tx.delivery.list_live_targets() if t.id in delivered]
    if not live:
        return None
    if len(live) > 1:
        names = ", ".join(t.name for t in live) or "none"
        raise InvalidInput(f"name the target the run's tasks run on with --target (targets {package} was "
                           f"delivered to: {names})")
    return live[0]
