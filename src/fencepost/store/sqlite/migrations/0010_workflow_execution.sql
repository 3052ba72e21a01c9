-- fencepost: foreign-keys-off
-- fencepost control schema, version 10: workflow execution (issue 18; ADRs 0072-0075). A Run gains its cancel
-- intent and its settled instant; StepRuns, events and StepRun mutations gain the statuses, types and kinds of
-- progress (a mutation now names the status it left, the Run fence it took, its reason, its task's invocation
-- and its event); a run-level ledger records the Run's own changes; a start barrier row records each step
-- attempt and the invocation of its task.
--
-- Rebuilding: SQLite cannot widen a CHECK list in place (ADR 0017). Every existing row is copied unchanged;
-- the new columns are NULL for them (admission's rows are 'create' mutations, which carry none).
CREATE TABLE new_workflow_runs (
    id                  TEXT PRIMARY KEY,
    plan_id             TEXT NOT NULL UNIQUE,
    installation_id     TEXT NOT NULL REFERENCES package_installations (id),
    publication_id      TEXT NOT NULL REFERENCES package_publications (id),
    workflow_id         TEXT NOT NULL,
    status              TEXT NOT NULL CHECK (status IN ('running', 'succeeded', 'failed', 'cancelled', 'timed_out')),
    fence               INTEGER NOT NULL CHECK (fence >= 1),
    created_at          TEXT NOT NULL,
    cancel_requested_at TEXT,
    cancel_reason       TEXT CHECK (length(cancel_reason) BETWEEN 1 AND 1000),
    settled_at          TEXT,
    CHECK ((cancel_requested_at IS NULL) = (cancel_reason IS NULL)),
    CHECK ((status = 'running') = (settled_at IS NULL))
);
INSERT INTO new_workflow_runs (id, plan_id, installation_id, publication_id, workflow_id, status, fence, created_at, settled_at)
SELECT id, plan_id, installation_id, publication_id, workflow_id, status, fence, created_at,
       CASE WHEN status = 'running' THEN NULL ELSE created_at END FROM workflow_runs;
DROP TABLE workflow_runs;
ALTER TABLE new_workflow_runs RENAME TO workflow_runs;
CREATE INDEX workflow_runs_cancelling ON workflow_runs (id) WHERE status = 'running' AND cancel_requested_at IS NOT NULL;

CREATE TABLE new_workflow_step_runs (
    id          TEXT PRIMARY KEY,
    run_id      TEXT NOT NULL REFERENCES workflow_runs (id),
    step_key    TEXT NOT NULL CHECK (length(step_key) BETWEEN 1 AND 64),
    task_id     TEXT NOT NULL,
    task_digest TEXT NOT NULL CHECK ((length(task_digest) = 71 AND substr(task_digest, 1, 7) = 'sha256:' AND NOT substr(task_digest, 8) GLOB '*[^0-9a-f]*')),
    needs       TEXT NOT NULL CHECK (json_valid(needs) AND json_type(needs) = 'array'),
    status      TEXT NOT NULL CHECK (status IN ('waiting', 'ready', 'running', 'lost', 'succeeded', 'failed', 'skipped', 'cancelled', 'timed_out')),
    fence       INTEGER NOT NULL CHECK (fence >= 1),
    created_at  TEXT NOT NULL,
    UNIQUE (run_id, step_key)
);
INSERT INTO new_workflow_step_runs (id, run_id, step_key, task_id, task_digest, needs, status, fence, created_at)
SELECT id, run_id, step_key, task_id, task_digest, needs, status, fence, created_at FROM workflow_step_runs;
DROP TABLE workflow_step_runs;
ALTER TABLE new_workflow_step_runs RENAME TO workflow_step_runs;
-- The coordinator's candidate pages: Runs with a step to start, or a step whose task may have a verdict.
CREATE INDEX workflow_step_runs_active ON workflow_step_runs (status, run_id) WHERE status IN ('ready', 'running', 'lost');

CREATE TABLE new_workflow_events (
    id          TEXT PRIMARY KEY,
    run_id      TEXT NOT NULL REFERENCES workflow_runs (id),
    step_run_id TEXT REFERENCES workflow_step_runs (id),
    seq         INTEGER NOT NULL CHECK (seq >= 1),
    type        TEXT NOT NULL CHECK (type IN ('workflow.admitted', 'workflow.cancel_requested', 'workflow.succeeded', 'workflow.failed', 'workflow.cancelled', 'workflow.timed_out', 'step.created', 'step.ready', 'step.running', 'step.lost', 'step.succeeded', 'step.failed', 'step.skipped', 'step.cancelled', 'step.timed_out')),
    payload     TEXT NOT NULL CHECK (json_valid(payload) AND length(payload) <= 65536),
    created_at  TEXT NOT NULL,
    UNIQUE (run_id, seq),
    CHECK ((substr(type, 1, 5) = 'step.') = (step_run_id IS NOT NULL)),
    CHECK (json_extract(payload, '$.run_id') IS run_id)
);
INSERT INTO new_workflow_events (id, run_id, step_run_id, seq, type, payload, created_at)
SELECT id, run_id, step_run_id, seq, type, payload, created_at FROM workflow_events;
DROP TABLE workflow_events;
ALTER TABLE new_workflow_events RENAME TO workflow_events;

CREATE TABLE new_workflow_step_mutations (
    id            TEXT PRIMARY KEY,
    step_run_id   TEXT NOT NULL REFERENCES workflow_step_runs (id),
    run_id        TEXT NOT NULL REFERENCES workflow_runs (id),
    fence         INTEGER NOT NULL CHECK (fence >= 1),
    kind          TEXT NOT NULL CHECK (kind IN ('create', 'advance', 'start', 'settle', 'cancel', 'refuse')),
    to_status     TEXT NOT NULL CHECK (to_status IN ('waiting', 'ready', 'running', 'lost', 'succeeded', 'failed', 'skipped', 'cancelled', 'timed_out')),
    created_at    TEXT NOT NULL,
    from_status   TEXT CHECK (from_status IN ('waiting', 'ready', 'running', 'lost')),
    run_fence     INTEGER CHECK (run_fence >= 2),
    reason        TEXT CHECK (length(reason) BETWEEN 1 AND 1000),
    invocation_id TEXT,
    event_id      TEXT UNIQUE REFERENCES workflow_events (id),
    UNIQUE (step_run_id, fence),
    -- Admission's mutations create; every later one names the status it left, its Run fence and its event.
    CHECK ((kind = 'create') = (from_status IS NULL)),
    CHECK ((kind = 'create') = (run_fence IS NULL)),
    CHECK ((kind = 'create') = (event_id IS NULL)),
    CHECK (kind = 'create' OR to_status IN ('ready', 'skipped') OR kind != 'advance'),
    CHECK ((kind IN ('start', 'settle')) = (invocation_id IS NOT NULL))
);
INSERT INTO new_workflow_step_mutations (id, step_run_id, run_id, fence, kind, to_status, created_at)
SELECT id, step_run_id, run_id, fence, kind, to_status, created_at FROM workflow_step_mutations;
DROP TABLE workflow_step_mutations;
ALTER TABLE new_workflow_step_mutations RENAME TO workflow_step_mutations;
CREATE UNIQUE INDEX workflow_step_mutations_run_fence ON workflow_step_mutations (run_id, run_fence) WHERE run_fence IS NOT NULL;

-- The run-level ledger: every change of a Run's status or fence that is not a StepRun mutation (its cancel
-- intent, its terminal verdict), on the same counter as the StepRun mutations' run_fence.
CREATE TABLE workflow_run_mutations (
    id          TEXT PRIMARY KEY,
    run_id      TEXT NOT NULL REFERENCES workflow_runs (id),
    fence       INTEGER NOT NULL CHECK (fence >= 2),
    kind        TEXT NOT NULL CHECK (kind IN ('cancel_request', 'settle')),
    from_status TEXT NOT NULL CHECK (from_status IN ('running')),
    to_status   TEXT NOT NULL CHECK (to_status IN ('running', 'succeeded', 'failed', 'cancelled', 'timed_out')),
    reason      TEXT CHECK (length(reason) BETWEEN 1 AND 1000),
    actor       TEXT CHECK (length(actor) BETWEEN 1 AND 200),
    event_id    TEXT NOT NULL UNIQUE REFERENCES workflow_events (id),
    created_at  TEXT NOT NULL,
    UNIQUE (run_id, fence),
    CHECK ((kind = 'cancel_request') = (to_status = 'running'))
);
-- At most one cancel intent and one verdict per Run.
CREATE UNIQUE INDEX workflow_run_mutations_once ON workflow_run_mutations (run_id, kind);

-- The start barrier of each step attempt: written with the StepRun's ready -> running mutation, in the
-- transaction that re-checked the guards and submitted the step's task invocation.
CREATE TABLE workflow_step_starts (
    id              TEXT PRIMARY KEY,
    run_id          TEXT NOT NULL REFERENCES workflow_runs (id),
    step_run_id     TEXT NOT NULL REFERENCES workflow_step_runs (id),
    step_fence      INTEGER NOT NULL CHECK (step_fence >= 2),
    attempt         INTEGER NOT NULL CHECK (attempt BETWEEN 1 AND 64),
    invocation_id   TEXT NOT NULL UNIQUE CHECK (length(invocation_id) BETWEEN 1 AND 200),
    target_id       TEXT NOT NULL REFERENCES delivery_targets (id),
    timeout_seconds INTEGER NOT NULL CHECK (timeout_seconds BETWEEN 1 AND 86400),
    deadline_at     TEXT NOT NULL,
    started_at      TEXT NOT NULL,
    UNIQUE (step_run_id, step_fence),
    UNIQUE (step_run_id, attempt)
);
CREATE INDEX workflow_step_starts_by_run ON workflow_step_starts (run_id);
