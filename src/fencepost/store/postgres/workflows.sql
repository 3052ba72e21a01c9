-- Package publication, installation guards and workflow admission (ADR-0224), PostgreSQL dialect. The
-- same names exist in ../sqlite/workflows.sql. Instants arrive as :now, read once per transaction from
-- the server's clock (PostgresTransaction.now).

-- name: lock_package
-- Serializes guard changes and admissions of one package: the same guarantee SQLite's BEGIN IMMEDIATE
-- gives (no quarantine, disable or head move can commit between an admission's guard check and its
-- COMMIT). A transaction-scoped advisory lock, released at COMMIT or ROLLBACK.
SELECT 1 AS locked FROM (SELECT pg_advisory_xact_lock(hashtextextended('fencepost.package:' || :package_name, 0))) AS l;

-- name: runs_by_digest
-- The rehearsals (Runs) of one exact package content, newest first: publishing checks their gate.
SELECT id, package_name, package_version, previous_version, content_digest, manifest, status, created_at
FROM rehearsal_runs WHERE content_digest = :content_digest ORDER BY created_at DESC, id;

-- name: insert_publication
INSERT INTO package_publications (id, package_name, version, content_digest, definition, definition_digest,
                                  status, gate, gate_run_id, previous_publication_id, published_at)
VALUES (:id, :package_name, :version, :content_digest, :definition, :definition_digest, 'active', :gate,
        :gate_run_id, :previous_publication_id, :now);

-- name: get_publication
SELECT id, package_name, version, content_digest, definition, definition_digest, status, gate, gate_run_id,
       previous_publication_id, published_at, withdrawn_at
FROM package_publications WHERE id = :id;

-- name: get_publication_by_version
SELECT id, package_name, version, content_digest, definition, definition_digest, status, gate, gate_run_id,
       previous_publication_id, published_at, withdrawn_at
FROM package_publications WHERE package_name = :package_name AND version = :version;

-- name: list_publications
SELECT id, package_name, version, content_digest, definition, definition_digest, status, gate, gate_run_id,
       previous_publication_id, published_at, withdrawn_at
FROM package_publications WHERE package_name = :package_name ORDER BY published_at, id;

-- name: all_publications
-- Every publication (the audit re-verifies each definition digest).
SELECT id, package_name, version, content_digest, definition, definition_digest, status, gate, gate_run_id,
       previous_publication_id, published_at, withdrawn_at
FROM package_publications ORDER BY published_at, id;

-- name: all_installations
SELECT id, package_name, publication_id, lock_digest, status, generation, installed_at, updated_at
FROM package_installations ORDER BY package_name;

-- name: withdraw_publication
UPDATE package_publications SET status = 'withdrawn', withdrawn_at = :now WHERE id = :id AND status = 'active';

-- name: get_head
SELECT package_name, publication_id, revision, updated_at FROM package_heads WHERE package_name = :package_name;

-- name: insert_head
INSERT INTO package_heads (package_name, publication_id, revision, updated_at)
VALUES (:package_name, :publication_id, 1, :now);

-- name: move_head
-- Compare-and-set: moves only from the revision the caller saw.
UPDATE package_heads SET publication_id = :publication_id, revision = revision + 1, updated_at = :now
WHERE package_name = :package_name AND revision = :expected_revision;

-- name: get_installation
SELECT id, package_name, publication_id, lock_digest, status, generation, installed_at, updated_at
FROM package_installations WHERE package_name = :package_name;

-- name: insert_installation
INSERT INTO package_installations (id, package_name, publication_id, lock_digest, status, generation,
                                   installed_at, updated_at)
VALUES (:id, :package_name, :publication_id, :lock_digest, 'active', 1, :now, :now);

-- name: update_installation
-- Compare-and-set on generation: activate another publication (and so another lock).
UPDATE package_installations
SET publication_id = :publication_id, lock_digest = :lock_digest, status = 'active', generation = generation + 1,
    updated_at = :now
WHERE id = :id AND generation = :expected_generation;

-- name: get_disposition
SELECT installation_id, disposition, reason, updated_at FROM installation_dispositions
WHERE installation_id = :installation_id;

-- name: set_disposition
INSERT INTO installation_dispositions (installation_id, disposition, reason, updated_at)
VALUES (:installation_id, :disposition, :reason, :now)
ON CONFLICT (installation_id) DO UPDATE
SET disposition = excluded.disposition, reason = excluded.reason, updated_at = excluded.updated_at;

-- name: open_quarantine
SELECT id, installation_id, lock_digest, reason, quarantined_at FROM installation_quarantines
WHERE installation_id = :installation_id AND lock_digest = :lock_digest AND released_at IS NULL;

-- name: insert_quarantine
INSERT INTO installation_quarantines (id, installation_id, lock_digest, reason, quarantined_at)
VALUES (:id, :installation_id, :lock_digest, :reason, :now);

-- name: release_quarantine
UPDATE installation_quarantines SET released_at = :now, release_reason = :reason
WHERE installation_id = :installation_id AND lock_digest = :lock_digest AND released_at IS NULL;

-- name: get_admission
SELECT plan_id, plan_digest, plan, run_id, package_name, publication_id, installation_id, lock_digest,
       workflow_id, workflow_digest, step_count, final_fence, receipt_id, admitted_at
FROM workflow_admissions WHERE plan_id = :plan_id;

-- name: list_admission_plan_ids
-- Every admitted plan id (the audit verifies each admission against its re-derived bundle).
SELECT plan_id FROM workflow_admissions ORDER BY admitted_at, plan_id;

-- name: get_admission_by_run
SELECT plan_id, plan_digest, plan, run_id, package_name, publication_id, installation_id, lock_digest,
       workflow_id, workflow_digest, step_count, final_fence, receipt_id, admitted_at
FROM workflow_admissions WHERE run_id = :run_id;

-- name: admission_steps
SELECT plan_id, step_key, task_id, task_digest, needs, step_run_id, mutation_id, event_id
FROM workflow_admission_steps WHERE plan_id = :plan_id ORDER BY step_key;

-- name: get_workflow_run
SELECT id, plan_id, installation_id, publication_id, workflow_id, status, fence, created_at
FROM workflow_runs WHERE id = :id;

-- name: list_workflow_runs
SELECT id, plan_id, installation_id, publication_id, workflow_id, status, fence, created_at
FROM workflow_runs ORDER BY created_at DESC, id LIMIT :limit;

-- name: workflow_step_runs
SELECT id, run_id, step_key, task_id, task_digest, needs, status, fence, created_at
FROM workflow_step_runs WHERE run_id = :run_id ORDER BY step_key;

-- name: workflow_events
SELECT id, run_id, step_run_id, seq, type, payload, created_at
FROM workflow_events WHERE run_id = :run_id ORDER BY seq;

-- name: workflow_mutations
SELECT id, step_run_id, run_id, fence, kind, to_status, created_at
FROM workflow_step_mutations WHERE run_id = :run_id ORDER BY step_run_id, fence;

-- name: get_admission_receipt
SELECT id, plan_id, run_id, receipt, receipt_digest FROM workflow_admission_receipts WHERE plan_id = :plan_id;

-- name: insert_workflow_run
INSERT INTO workflow_runs (id, plan_id, installation_id, publication_id, workflow_id, status, fence, created_at)
VALUES (:id, :plan_id, :installation_id, :publication_id, :workflow_id, 'running', :fence, :now);

-- name: insert_workflow_event
INSERT INTO workflow_events (id, run_id, step_run_id, seq, type, payload, created_at)
VALUES (:id, :run_id, :step_run_id, :seq, :type, :payload, :now);

-- name: insert_step_run
INSERT INTO workflow_step_runs (id, run_id, step_key, task_id, task_digest, needs, status, fence, created_at)
VALUES (:id, :run_id, :step_key, :task_id, :task_digest, :needs, :status, :fence, :now);

-- name: insert_step_mutation
INSERT INTO workflow_step_mutations (id, step_run_id, run_id, fence, kind, to_status, created_at)
VALUES (:id, :step_run_id, :run_id, :fence, 'create', :to_status, :now);

-- name: insert_admission
INSERT INTO workflow_admissions (plan_id, plan_digest, plan, run_id, package_name, publication_id,
                                 installation_id, lock_digest, workflow_id, workflow_digest, step_count,
                                 final_fence, receipt_id, admitted_at)
VALUES (:plan_id, :plan_digest, :plan, :run_id, :package_name, :publication_id, :installation_id, :lock_digest,
        :workflow_id, :workflow_digest, :step_count, :final_fence, :receipt_id, :now);

-- name: insert_admission_step
INSERT INTO workflow_admission_steps (plan_id, step_key, task_id, task_digest, needs, step_run_id, mutation_id,
                                      event_id)
VALUES (:plan_id, :step_key, :task_id, :task_digest, :needs, :step_run_id, :mutation_id, :event_id);

-- name: insert_admission_receipt
INSERT INTO workflow_admission_receipts (id, plan_id, run_id, receipt, receipt_digest)
VALUES (:id, :plan_id, :run_id, :receipt, :receipt_digest);
