"""The deterministic admission bundle of a normalized plan (ADR-0224, decision 2, step 1 and decision 4).

Every identity an admission writes (Run, StepRuns, events, mutations, receipt) is derived from the plan
id and plan digest, so a retry after a lost COMMIT response re-derives the same ids and finds the durable
winner instead of creating a twin. ``records`` is what admission writes and replay verifies the stored
rows against.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from fencepost.core.canonical import canonical_json
from fencepost.core.clock import to_iso
from fencepost.core.fingerprint import fingerprint
from fencepost.core.ids import derived_id
from fencepost.core.statuses import StepMutationKind, StepRunStatus, WorkflowEventType, WorkflowRunStatus
from fencepost.store.workflow_records import (
    AdmissionReceiptRow,
    AdmissionRecord,
    AdmissionRow,
    AdmissionStepRow,
    StepMutationRow,
    StepRunRow,
    WorkflowEventRow,
    WorkflowRunRow,
)
from fencepost.workflows.plan import NormalizedPlan

RUN_FENCE = 1          # the Run's fence after admission; every later mutation increments it
RECEIPT_DOMAIN = "workflow-admission-receipt/v1"


@dataclass(frozen=True)
class AdmissionBundle:
    plan: NormalizedPlan
    run_id: str
    receipt_id: str
    step_run_ids: dict[str, str]
    admitted_event_id: str
    step_event_ids: dict[str, str]
    mutation_ids: dict[str, str]

    @property
    def steps(self) -> list[dict[str, Any]]:
        return self.plan.steps

    def receipt(self, admitted_at: datetime) -> dict[str, Any]:
        """The admission receipt (stored once; replay returns the stored one after verifying it)."""
        return {
            "receipt_id": self.receipt_id, "plan_id": self.plan.plan_id, "plan_digest": self.plan.digest,
            "run_id": self.run_id, "package": self.plan.data["package"],
            "publication_id": self.plan.data["publication_id"], "installation_id": self.plan.data["installation_id"],
            "workflow_id": self.plan.data["workflow_id"], "workflow_digest": self.plan.data["workflow_digest"],
            "final_fence": RUN_FENCE, "admitted_at": to_iso(admitted_at),
            "step_runs": [{"key": s["key"], "step_run_id": self.step_run_ids[s["key"]],
                           "status": str(_status(s)), "event_id": self.step_event_ids[s["key"]],
                           "mutation_id": self.mutation_ids[s["key"]]} for s in self.steps],
            "admitted_event_id": self.admitted_event_id,
        }

    def records(self, admitted_at: datetime) -> list[AdmissionRecord]:
        """Every row admission writes, typed, in ADR-0224 order: Run, ``workflow.admitted``, StepRuns,
        ``step.created`` events, StepRun mutations, admission, admission steps, receipt. Replay verifies the
        stored rows against exactly these."""
        p = self.plan.data
        records: list[AdmissionRecord] = [
            WorkflowRunRow(id=self.run_id, plan_id=self.plan.plan_id, installation_id=p["installation_id"],
                           publication_id=p["publication_id"], workflow_id=p["workflow_id"],
                           status=WorkflowRunStatus.RUNNING, fence=RUN_FENCE, created_at=admitted_at),
            WorkflowEventRow(id=self.admitted_event_id, run_id=self.run_id, step_run_id=None, seq=1,
                             type=WorkflowEventType.ADMITTED, created_at=admitted_at,
                             payload=canonical_json({"run_id": self.run_id, "plan_id": self.plan.plan_id,
                                                     "plan_digest": self.plan.digest, "workflow_id": p["workflow_id"],
                                                     "workflow_digest": p["workflow_digest"],
                                                     "step_count": len(self.steps)})),
        ]
        for s in self.steps:
            records.append(StepRunRow(id=self.step_run_ids[s["key"]], run_id=self.run_id, step_key=s["key"],
                                      task_id=s["task"], task_digest=s["task_digest"], needs=canonical_json(s["needs"]),
                                      status=_status(s), fence=RUN_FENCE, created_at=admitted_at))
        for seq, s in enumerate(self.steps, start=2):
            records.append(WorkflowEventRow(
                id=self.step_event_ids[s["key"]], run_id=self.run_id, step_run_id=self.step_run_ids[s["key"]],
                seq=seq, type=WorkflowEventType.STEP_CREATED, created_at=admitted_at,
                payload=canonical_json({"run_id": self.run_id, "step_run_id": self.step_run_ids[s["key"]],
                                        "step_key": s["key"], "task": s["task"], "task_digest": s["task_digest"],
                                        "needs": s["needs"], "status": _status(s)})))
        for s in self.steps:
            records.append(StepMutationRow(id=self.mutation_ids[s["key"]], step_run_id=self.step_run_ids[s["key"]],
                                           run_id=self.run_id, fence=RUN_FENCE, kind=StepMutationKind.CREATE,
                                           to_status=_status(s), created_at=admitted_at))
        records.append(AdmissionRow(
            plan_id=self.plan.plan_id, plan_digest=self.plan.digest, plan=self.plan.text, run_id=self.run_id,
            package_name=p["package"], publication_id=p["publication_id"], installation_id=p["installation_id"],
            lock_digest=p["lock"], workflow_id=p["workflow_id"], workflow_digest=p["workflow_digest"],
            step_count=len(self.steps), final_fence=RUN_FENCE, receipt_id=self.receipt_id, admitted_at=admitted_at))
        for s in self.steps:
            records.append(AdmissionStepRow(
                plan_id=self.plan.plan_id, step_key=s["key"], task_id=s["task"], task_digest=s["task_digest"],
                needs=canonical_json(s["needs"]), step_run_id=self.step_run_ids[s["key"]],
                mutation_id=self.mutation_ids[s["key"]], event_id=self.step_event_ids[s["key"]]))
        receipt = self.receipt(admitted_at)
        records.append(AdmissionReceiptRow(id=self.receipt_id, plan_id=self.plan.plan_id, run_id=self.run_id,
                                           receipt=canonical_json(receipt),
                                           receipt_digest=fingerprint(RECEIPT_DOMAIN, receipt)))
        return records


def _status(step: dict[str, Any]) -> StepRunStatus:
    return StepRunStatus.READY if step["ready"] else StepRunStatus.WAITING


def derive_bundle(plan: NormalizedPlan) -> AdmissionBundle:
    """Derive every identity of ``plan``'s admission (pure; no I/O)."""
    identity = {"plan_id": plan.plan_id, "plan_digest": plan.digest}
    run_id = derived_id("wfr", "workflow-run/v1", identity)
    step_run_ids = {s["key"]: derived_id("wsr", "workflow-step-run/v1", {**identity, "key": s["key"]})
                    for s in plan.steps}
    if len(set(step_run_ids.values())) != len(step_run_ids):  # pragma: no cover - 128-bit collision
        raise ValueError("derived StepRun ids collide")
    step_event_ids = {s["key"]: derived_id("wev", "workflow-event/v1", {"run_id": run_id, "seq": seq})
                      for seq, s in enumerate(plan.steps, start=2)}
    mutation_ids = {key: derived_id("wsm", "workflow-step-mutation/v1", {"step_run_id": sid, "fence": RUN_FENCE})
                    for key, sid in step_run_ids.items()}
    return AdmissionBundle(
        plan=plan, run_id=run_id, receipt_id=derived_id("wrc", RECEIPT_DOMAIN, identity),
        step_run_ids=step_run_ids,
        admitted_event_id=derived_id("wev", "workflow-event/v1", {"run_id": run_id, "seq": 1}),
        step_event_ids=step_event_ids, mutation_ids=mutation_ids)
