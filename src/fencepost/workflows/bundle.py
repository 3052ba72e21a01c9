"""The deterministic admission bundle of a normalized plan (ADR-0224, decision 2, step 1 and decision 4).

Every identity an admission writes (Run, StepRuns, events, mutations, receipt) is derived from the plan
id and plan digest, so a retry after a lost COMMIT response re-derives the same ids and finds the durable
winner instead of creating a twin. ``expected_rows`` is what replay verifies the stored rows against.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from fencepost.core.canonical import canonical_json
from fencepost.core.clock import to_iso
from fencepost.core.fingerprint import fingerprint
from fencepost.core.ids import derived_id
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
                           "status": _status(s), "event_id": self.step_event_ids[s["key"]],
                           "mutation_id": self.mutation_ids[s["key"]]} for s in self.steps],
            "admitted_event_id": self.admitted_event_id,
        }

    def inserts(self, admitted_at: datetime) -> list[tuple[str, dict[str, Any]]]:
        """``(insert query name, params)`` in ADR-0224 order: Run, ``workflow.admitted``, StepRuns,
        ``step.created`` events, StepRun mutations, admission, admission steps, receipt."""
        return [(f"insert_{table}", row) for table, row in self._rows(admitted_at)]

    def expected_rows(self, admitted_at: datetime) -> dict[str, list[dict[str, Any]]]:
        """The stored rows an intact admission has, by table (the columns admission wrote)."""
        expected: dict[str, list[dict[str, Any]]] = {}
        for table, row in self._rows(admitted_at):
            expected.setdefault(_TABLES[table], []).append(row)
        return expected

    def _rows(self, admitted_at: datetime) -> list[tuple[str, dict[str, Any]]]:
        p = self.plan.data
        rows: list[tuple[str, dict[str, Any]]] = [
            ("workflow_run", {"id": self.run_id, "plan_id": self.plan.plan_id, "installation_id": p["installation_id"],
                              "publication_id": p["publication_id"], "workflow_id": p["workflow_id"],
                              "fence": RUN_FENCE, "now": admitted_at}),
            ("workflow_event", {"id": self.admitted_event_id, "run_id": self.run_id, "step_run_id": None, "seq": 1,
                                "type": "workflow.admitted", "now": admitted_at,
                                "payload": canonical_json({"run_id": self.run_id, "plan_id": self.plan.plan_id,
                                                           "plan_digest": self.plan.digest,
                                                           "workflow_id": p["workflow_id"],
                                                           "workflow_digest": p["workflow_digest"],
                                                           "step_count": len(self.steps)})}),
        ]
        for s in self.steps:
            rows.append(("step_run", {"id": self.step_run_ids[s["key"]], "run_id": self.run_id, "step_key": s["key"],
                                      "task_id": s["task"], "task_digest": s["task_digest"],
                                      "needs": canonical_json(s["needs"]), "status": _status(s), "fence": RUN_FENCE,
                                      "now": admitted_at}))
        for seq, s in enumerate(self.steps, start=2):
            rows.append(("workflow_event", {
                "id": self.step_event_ids[s["key"]], "run_id": self.run_id, "step_run_id": self.step_run_ids[s["key"]],
                "seq": seq, "type": "step.created", "now": admitted_at,
                "payload": canonical_json({"run_id": self.run_id, "step_run_id": self.step_run_ids[s["key"]],
                                           "step_key": s["key"], "task": s["task"], "task_digest": s["task_digest"],
                                           "needs": s["needs"], "status": _status(s)})}))
        for s in self.steps:
            rows.append(("step_mutation", {"id": self.mutation_ids[s["key"]],
                                           "step_run_id": self.step_run_ids[s["key"]], "run_id": self.run_id,
                                           "fence": RUN_FENCE, "to_status": _status(s), "now": admitted_at}))
        rows.append(("admission", {
            "plan_id": self.plan.plan_id, "plan_digest": self.plan.digest, "plan": self.plan.text,
            "run_id": self.run_id, "package_name": p["package"], "publication_id": p["publication_id"],
            "installation_id": p["installation_id"], "lock_digest": p["lock"], "workflow_id": p["workflow_id"],
            "workflow_digest": p["workflow_digest"], "step_count": len(self.steps), "final_fence": RUN_FENCE,
            "receipt_id": self.receipt_id, "now": admitted_at}))
        for s in self.steps:
            rows.append(("admission_step", {
                "plan_id": self.plan.plan_id, "step_key": s["key"], "task_id": s["task"],
                "task_digest": s["task_digest"], "needs": canonical_json(s["needs"]),
                "step_run_id": self.step_run_ids[s["key"]], "mutation_id": self.mutation_ids[s["key"]],
                "event_id": self.step_event_ids[s["key"]]}))
        receipt = self.receipt(admitted_at)
        rows.append(("admission_receipt", {"id": self.receipt_id, "plan_id": self.plan.plan_id, "run_id": self.run_id,
                                           "receipt": canonical_json(receipt),
                                           "receipt_digest": fingerprint(RECEIPT_DOMAIN, receipt)}))
        return rows


_TABLES = {"workflow_run": "workflow_runs", "workflow_event": "workflow_events", "step_run": "workflow_step_runs",
           "step_mutation": "workflow_step_mutations", "admission": "workflow_admissions",
           "admission_step": "workflow_admission_steps", "admission_receipt": "workflow_admission_receipts"}


def _status(step: dict[str, Any]) -> str:
    return "ready" if step["ready"] else "waiting"


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
