-- Workflow progress (migration 0010, ADR 0072): the frontier's StepRun mutations, the start barrier, the
-- run-level ledger and the coordinator's candidate pages. Every write is a compare-and-set on the exact
-- status and fence read in the same transaction, which first locked the Run (lock_workflow_run).

-- name: lock_workflow_run
-- per-dialect
-- Serializes every progress transaction of one Run (SQLite: BEGIN IMMEDIATE already does; PostgreSQL: the
-- Run row FOR UPDATE, held to COMMIT).

-- name: get_run_state
-- instants: created_at, cancel_requested_at, settled_at
SELECT id, plan_id, installation_id, publication_id, workflow_id, status, fence, created_at,
       cancel_requested_at, cancel_reason, settled_at
FROM workflow_runs WHERE id = :id;

-- name: next_workflow_event_seq
SELECT COALESCE(MAX(seq), 0) + 1 AS seq FROM workflow_events WHERE run_id = :run_id;

-- name: cas_step_run
-- A StepRun moves only from the exact status and fence its mutation was computed from.
UPDATE workflow_step_runs SET status = :to_status, fence = :to_fence
WHERE id = :id AND run_id = :run_id AND status = :from_status AND fence = :from_fence;

-- name: cas_run
-- The Run's fence (and, with a verdict, its status and settled instant) from the exact fence read.
UPDATE workflow_runs SET fence = :to_fence, status = :to_status, settled_at = :settled_at
WHERE id = :id AND status = 'running' AND fence = :from_fence;

-- name: set_cancel_intent
UPDATE workflow_runs SET fence = :to_fence, cancel_requested_at = :now, cancel_reason = :reason
WHERE id = :id AND status = 'running' AND fence = :from_fence AND cancel_requested_at IS NULL;

-- name: insert_progress_mutation
INSERT INTO workflow_step_mutations (id, step_run_id, run_id, fence, kind, to_status, created_at, from_status,
                                     run_fence, reason, invocation_id, event_id)
VALUES (:id, :step_run_id, :run_id, :fence, :kind, :to_status, :created_at, :from_status, :run_fence, :reason,
        :invocation_id, :event_id);

-- name: insert_run_mutation
INSERT INTO workflow_run_mutations (id, run_id, fence, kind, from_status, to_status, reason, actor, event_id,
                                    created_at)
VALUES (:id, :run_id, :fence, :kind, :from_status, :to_status, :reason, :actor, :event_id, :created_at);

-- name: insert_step_start
INSERT INTO workflow_step_starts (id, run_id, step_run_id, step_fence, attempt, invocation_id, target_id,
                                  timeout_seconds, deadline_at, started_at)
VALUES (:id, :run_id, :step_run_id, :step_fence, :attempt, :invocation_id, :target_id, :timeout_seconds,
        :deadline_at, :started_at);

-- name: step_starts_of_run
-- instants: deadline_at, started_at
SELECT id, run_id, step_run_id, step_fence, attempt, invocation_id, target_id, timeout_seconds, deadline_at,
       started_at
FROM workflow_step_starts WHERE run_id = :run_id ORDER BY step_run_id, attempt;

-- name: get_step_start_by_invocation
-- instants: deadline_at, started_at
SELECT id, run_id, step_run_id, step_fence, attempt, invocation_id, target_id, timeout_seconds, deadline_at,
       started_at
FROM workflow_step_starts WHERE invocation_id = :invocation_id;

-- name: task_outcomes_of_run
-- The invocation of the newest attempt of every running or lost StepRun of the Run.
SELECT st.step_run_id, st.invocation_id, i.status, i.error
FROM workflow_step_runs AS s
JOIN workflow_step_starts AS st ON st.step_run_id = s.id
JOIN invocations AS i ON i.id = st.invocation_id
WHERE s.run_id = :run_id AND s.status IN ('running', 'lost')
  AND st.attempt = (SELECT MAX(attempt) FROM workflow_step_starts AS later WHERE later.step_run_id = s.id);

-- name: task_statuses_of_run
-- The status of every start's task invocation of the Run (what a page shows beside each step).
SELECT st.step_run_id, st.attempt, st.invocation_id, i.status, i.error
FROM workflow_step_starts AS st
JOIN invocations AS i ON i.id = st.invocation_id
WHERE st.run_id = :run_id
ORDER BY st.step_run_id, st.attempt;

-- name: progress_mutations_of_run
-- instants: created_at
SELECT id, step_run_id, run_id, fence, kind, from_status, to_status, run_fence, reason, invocation_id, event_id,
       created_at
FROM workflow_step_mutations WHERE run_id = :run_id AND kind <> 'create' ORDER BY run_fence;

-- name: run_mutations_of_run
-- instants: created_at
SELECT id, run_id, fence, kind, from_status, to_status, reason, actor, event_id, created_at
FROM workflow_run_mutations WHERE run_id = :run_id ORDER BY fence;

-- name: runs_with_task_verdicts
-- Candidate page: running Runs with a running step whose task has a verdict, or a lost step whose task an
-- operator resolved; in id order after :after (the coordinator's round-robin cursor).
SELECT DISTINCT s.run_id
FROM workflow_step_runs AS s
JOIN workflow_step_starts AS st ON st.step_run_id = s.id
JOIN invocations AS i ON i.id = st.invocation_id
WHERE s.status IN ('running', 'lost') AND s.run_id > :after
  AND ((s.status = 'running' AND i.status IN ('succeeded', 'failed', 'reconciliation_required'))
       OR (s.status = 'lost' AND i.status IN ('succeeded', 'failed')))
ORDER BY s.run_id LIMIT :limit;

-- name: runs_with_ready_steps
-- Candidate page: running Runs with a step to start (or, under a cancel intent, to cancel).
SELECT DISTINCT s.run_id
FROM workflow_step_runs AS s
JOIN workflow_runs AS r ON r.id = s.run_id
WHERE s.status = 'ready' AND r.status = 'running' AND s.run_id > :after
ORDER BY s.run_id LIMIT :limit;

-- name: runs_cancelling
-- Candidate page: Runs with a cancel intent and a step that is not executing yet.
SELECT r.id AS run_id
FROM workflow_runs AS r
WHERE r.status = 'running' AND r.cancel_requested_at IS NOT NULL AND r.id > :after
  AND EXISTS (SELECT 1 FROM workflow_step_runs AS s WHERE s.run_id = r.id AND s.status IN ('waiting', 'ready'))
ORDER BY r.id LIMIT :limit;

-- name: list_workflow_runs
-- instants: created_at, cancel_requested_at, settled_at
SELECT id, plan_id, installation_id, publication_id, workflow_id, status, fence, created_at,
       cancel_requested_at, cancel_reason, settled_at
FROM workflow_runs WHERE (CAST(:status AS TEXT) IS NULL OR status = CAST(:status AS TEXT))
ORDER BY created_at DESC, id DESC LIMIT :limit;
