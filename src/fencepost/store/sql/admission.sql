-- Atomic workflow admission (ADR-0224): the admission ledger and the rows it writes in one transaction.
-- Replay reads them back (admission_*) and verifies them against the re-derived bundle.

-- name: get_admission
-- instants: admitted_at
SELECT plan_id, plan_digest, plan, run_id, package_name, publication_id, installation_id, lock_digest,
       workflow_id, workflow_digest, step_count, final_fence, receipt_id, admitted_at
FROM workflow_admissions WHERE plan_id = :plan_id;

-- name: list_admission_plan_ids
-- Every admitted plan id (the audit verifies each admission against its re-derived bundle).
SELECT plan_id FROM workflow_admissions ORDER BY admitted_at, plan_id;

-- name: get_admission_by_run
-- instants: admitted_at
SELECT plan_id, plan_digest, plan, run_id, package_name, publication_id, installation_id, lock_digest,
       workflow_id, workflow_digest, step_count, final_fence, receipt_id, admitted_at
FROM workflow_admissions WHERE run_id = :run_id;

-- name: admission_steps
SELECT plan_id, step_key, task_id, task_digest, needs, step_run_id, mutation_id, event_id
FROM workflow_admission_steps WHERE plan_id = :plan_id ORDER BY step_key;

-- name: admission_run
-- instants: created_at
SELECT id, plan_id, installation_id, publication_id, workflow_id, status, fence, created_at
FROM workflow_runs WHERE id = :id;

-- name: workflow_step_runs
-- instants: created_at
SELECT id, run_id, step_key, task_id, task_digest, needs, status, fence, created_at
FROM workflow_step_runs WHERE run_id = :run_id ORDER BY step_key;

-- name: workflow_events
-- instants: created_at
SELECT id, run_id, step_run_id, seq, type, payload, created_at
FROM workflow_events WHERE run_id = :run_id ORDER BY seq;

-- name: workflow_mutations
-- instants: created_at
SELECT id, step_run_id, run_id, fence, kind, to_status, created_at
FROM workflow_step_mutations WHERE run_id = :run_id ORDER BY step_run_id, fence;

-- name: get_admission_receipt
SELECT id, plan_id, run_id, receipt, receipt_digest FROM workflow_admission_receipts WHERE plan_id = :plan_id;

-- name: insert_workflow_run
INSERT INTO workflow_runs (id, plan_id, installation_id, publication_id, workflow_id, status, fence, created_at)
VALUES (:id, :plan_id, :installation_id, :publication_id, :workflow_id, :status, :fence, :created_at);

-- name: insert_workflow_event
INSERT INTO workflow_events (id, run_id, step_run_id, seq, type, payload, created_at)
VALUES (:id, :run_id, :step_run_id, :seq, :type, :payload, :created_at);

-- name: insert_step_run
INSERT INTO workflow_step_runs (id, run_id, step_key, task_id, task_digest, needs, status, fence, created_at)
VALUES (:id, :run_id, :step_key, :task_id, :task_digest, :needs, :status, :fence, :created_at);

-- name: insert_step_mutation
INSERT INTO workflow_step_mutations (id, step_run_id, run_id, fence, kind, to_status, created_at)
VALUES (:id, :step_run_id, :run_id, :fence, :kind, :to_status, :created_at);

-- name: insert_admission
INSERT INTO workflow_admissions (plan_id, plan_digest, plan, run_id, package_name, publication_id,
                                 installation_id, lock_digest, workflow_id, workflow_digest, step_count,
                                 final_fence, receipt_id, admitted_at)
VALUES (:plan_id, :plan_digest, :plan, :run_id, :package_name, :publication_id, :installation_id, :lock_digest,
        :workflow_id, :workflow_digest, :step_count, :final_fence, :receipt_id, :admitted_at);

-- name: insert_admission_step
INSERT INTO workflow_admission_steps (plan_id, step_key, task_id, task_digest, needs, step_run_id, mutation_id,
                                      event_id)
VALUES (:plan_id, :step_key, :task_id, :task_digest, :needs, :step_run_id, :mutation_id, :event_id);

-- name: insert_admission_receipt
INSERT INTO workflow_admission_receipts (id, plan_id, run_id, receipt, receipt_digest)
VALUES (:id, :plan_id, :run_id, :receipt, :receipt_digest);
