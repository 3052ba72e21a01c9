"""What the CLI and the API call for workflows: build a plan, admit it, show an admission, start a Run (plan,
then admit), read Runs and cancel one (ADRs 0072, 0073)."""

from __future__ import annotations

import dataclasses
import secrets
from typing import Any

from fencepost.core.errors import InvalidInput, NotFound
from fencepost.core.statuses import InvocationStatus
from fencepost.store.base import Store
from fencepost.store.delivery_records import TargetRecord
from fencepost.store.ports import UnitOfWork
from fencepost.workflows.admission import AdmissionResult, admit
from fencepost.workflows.cancel import request_cancel
from fencepost.workflows.plan import PLAN_FORMAT, normalize_plan
from fencepost.workflows.progress import advance
from fencepost.workflows.task import workflow_host
from fencepost.workflows.views import run_view


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
            # None means "pick one"; an empty id is the caller's (an unset key) and fails validation
            key = plan_id if plan_id is not None else f"plan_{secrets.token_hex(12)}"
            return {
                "format": PLAN_FORMAT, "plan_id": key, "package": package,
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

    def start(self, plan: Any) -> AdmissionResult:
        """Admit ``plan`` for running: as ``admit``, but refused when it names no target.

        A plan without a target is admitted by ``admit`` (and each of its steps is then refused by the
        ``target`` start guard); a caller that means to run it is told so before anything is written.

        Raises:
            InvalidPlan: not a plan, or a broken one (``normalize_plan``), before any word on its target.
            InvalidInput: the plan names no target. Whatever ``admit`` raises.
        """
        normalize_plan(plan)  # a file that is no plan at all is told so, not that it names no target (a trial)
        require_target(plan)
        return self.admit(plan)

    def run(self, run_id: str) -> dict[str, Any]:
        """``views.run_view`` of ``run_id`` in one read. Raises NotFound: no such Run."""
        return self.store.read(lambda tx: run_view(tx, run_id))

    def cancel(self, run_id: str, *, reason: str, actor: str) -> dict[str, Any]:
        """Cancel ``run_id``: store the intent (``cancel.request_cancel``), then advance the Run once, so its
        steps that have not started are cancelled now rather than at the next worker sweep (ADR 0073).

        Returns:
            ``{"outcome": "requested"|"existing"|"settled", "run_id", "cancelled_now": [step keys cancelled by
            this call], "still_running": [keys of steps running or lost: the Run settles after them],
            "run": run_view}``. A settled Run is left as it is (no advance).
        Raises:
            InvalidInput: a bad reason or actor. NotFound: no such Run.
        """
        before = self.run(run_id)
        run_id = str(before["run_id"])  # a plan id names its Run too
        result = request_cancel(self.store, run_id, reason=reason, actor=actor)
        if result.outcome != "settled":
            advance(self.store, workflow_host(self.store), run_id)
        after = self.run(run_id)
        was = {s["key"]: s["status"] for s in before["steps"]}
        return {"outcome": result.outcome, "run_id": run_id,
                "cancelled_now": [s["key"] for s in after["steps"]
                                  if s["status"] == "cancelled" and was.get(s["key"]) != "cancelled"],
                "still_running": [s["key"] for s in after["steps"] if s["status"] in ("running", "lost")],
                "run": after}

    def show(self, ident: str) -> dict[str, Any]:
        """An admission by plan id or run id: ``{"admission": AdmissionRow, "rows": {table: [row dicts]}}``.

        Raises:
            NotFound: no admission has that plan id or run id.
        """

        def unit(tx: UnitOfWork) -> dict[str, Any]:
            # The Run id first, as every other command reads an ident (views.run_view), so one ident never names
            # two Runs; a plan id may not look like a Run id (plan.RUN_ID_PREFIX) but an older store may hold one.
            admission = tx.admission.get_by_run(ident) or tx.admission.get(ident)
            if admission is None:
                raise NotFound(f"no workflow admission or run {ident}")
            stored = tx.admission.stored(admission.plan_id, admission.run_id)
            tables = (stored.steps, stored.run, stored.step_runs, stored.events, stored.mutations, stored.receipts)
            rows = {records[0].table: [dataclasses.asdict(r) for r in records] for records in tables if records}
            return {"admission": admission, "rows": rows}

        return self.store.read(unit)


def require_target(plan: Any) -> None:
    """Refuse a plan (a dict; anything else is left to admission's normalization) that names no target.

    Raises:
        InvalidInput: no ``target_id``; the message says how to deliver the package or name a target.
    """
    if isinstance(plan, dict) and "target_id" not in plan:
        name = plan.get("package") if isinstance(plan.get("package"), str) else "PACKAGE"
        raise InvalidInput(f"the plan names no target (no target_id), so its steps could never start: plan it "
                           f"again with --target NAME, or deliver {name} first (`fencepost package install {name} "
                           "--target NAME`; `workflow plan` then names the one live target it was delivered to)")


def _target(tx: UnitOfWork, package: str, publication_id: str, name: str | None) -> TargetRecord | None:
    """The named live target, else the only live target ``publication_id`` was delivered to successfully (a
    delivery that failed or awaits reconciliation does not count), else None when there is none (a plan without
    a target is admitted, but its steps cannot start).

    Raises:
        NotFound: no live target ``name``. InvalidInput: ``name`` holds no successful delivery of this version
        (its tasks could not run there), or no name and several targets hold one.
    """
    delivered = _delivered(tx, package, publication_id)
    if name is not None:
        found = tx.delivery.get_live_target(name)
        if found is None:
            raise NotFound(f"no live delivery target {name} (add one with fencepost target add)")
        if found.id not in delivered:
            publication = tx.catalog.get_publication(publication_id)
            version = publication.version if publication is not None else publication_id
            raise InvalidInput(f"target {name} holds no successful delivery of {package} {version}, so the "
                               f"run's tasks could not run there; deliver it first (fencepost package install "
                               f"{package} --target {name})")
        return found
    live = [t for t in tx.delivery.list_live_targets() if t.id in delivered]
    if not live:
        return None
    if len(live) > 1:
        names = ", ".join(t.name for t in live) or "none"
        raise InvalidInput(f"name the target the run's tasks run on with --target (targets {package} was "
                           f"delivered to successfully: {names})")
    return live[0]


def _delivered(tx: UnitOfWork, package: str, publication_id: str) -> set[str]:
    """Ids of the targets holding a succeeded delivery of ``publication_id``."""
    delivered: set[str] = set()
    for start in tx.delivery.list_delivery_starts(package):
        if start.publication_id != publication_id or start.target_id in delivered:
            continue
        invocation = tx.host.get_invocation(start.invocation_id)
        if invocation is not None and invocation.status is InvocationStatus.SUCCEEDED:
            delivered.add(start.target_id)
    return delivered
