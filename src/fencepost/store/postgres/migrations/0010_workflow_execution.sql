-- fencepost control schema, version 10: workflow execution (issue 18; ADRs 0072-0075). A Run gains its cancel
-- intent and its settled instant; StepRuns, events and StepRun mutations gain the statuses, types and kinds of
-- progress (a mutation now names the status it left, the Run fence it took, its reason, its task's invocation
-- and its event); a run-level ledger records the Run's own changes; a start barrier row records each step
-- attempt and the invocation of its task.

ALTER TABLE workflow_runs
    DROP CONSTRAINT workflow_runs_status_check,
    ADD CONSTRAINT workflow_runs_status_check
        CHECK (status IN ('running', 'succeeded', 'failed', 'cancelled', 'timed_out')),
    ADD COLUMN cancel_requested_at TIMESTAMPTZ,
    ADD COLUMN cancel_reason TEXT CHECK (length(cancel_reason) BETWEEN 1 AND 1000),
    ADD COLUMN settled_at TIMESTAMPTZ;
UPDATE workflow_runs SET settled_at = created_at WHERE status <> 'running';
ALTER TABLE workflow_runs
    ADD CONSTRAINT workflow_runs_cancel_pair CHECK ((cancel_requested_at IS NULL) = (cancel_reason IS NULL)),
    ADD CONSTRAINT workflow_runs_settled CHECK ((status = 'running') = (settled_at IS NULL));
CREATE INDEX workflow_runs_cancelling ON workflow_runs (id) WHERE status = 'running' AND cancel_requested_at IS NOT NULL;

ALTER TABLE workflow_step_runs
    DROP CONSTRAINT workflow_step_runs_status_check,
    ADD CONSTRAINT workflow_step_runs_status_check
        CHECK (status IN ('waiting', 'ready', 'running', 'lost', 'succeeded', 'failed', 'skipped', 'cancelled', 'timed_out'));
-- The coordinator's candidate pages: Runs with a step to start, or a step whose task may have a verdict.
CREATE INDEX workflow_step_runs_active ON workflow_step_runs (status, run_id) WHERE status IN ('ready', 'running', 'lost');

ALTER TABLE workflow_events
    DROP CONSTRAINT workflow_events_type_check,
    ADD CONSTRAINT workflow_events_type_check
        CHECK (type IN ('workflow.admitted', 'workflow.cancel_requested', 'workflow.succeeded', 'workflow.failed', 'workflow.cancelled', 'workflow.timed_out', 'step.created', 'step.ready', 'step.running', 'step.lost', 'step.succeeded', 'step.failed', 'step.skipped', 'step.cancelled', 'step.timed_out')),
    DROP CONSTRAINT workflow_events_check,
    ADD CONSTRAINT workflow_events_check CHECK ((substr(type, 1, 5) = 'step.') = (step_run_id IS NOT NULL));

ALTER TABLE workflow_step_mutations
    DROP CONSTRAINT workflow_step_mutations_kind_check,
    ADD CONSTRAINT workflow_step_mutations_kind_check
        CHECK (kind IN ('create', 'advance', 'start', 'settle', 'cancel', 'refuse')),
    DROP CONSTRAINT workflow_step_mutations_to_status_check,
    ADD CONSTRAINT workflow_step_mutations_to_status_check
        CHECK (to_status IN ('waiting', 'ready', 'running', 'lost', 'succeeded', 'failed', 'skipped', 'cancelled', 'timed_out')),
    ADD COLUMN from_status TEXT CHECK (from_status IN ('waiting', 'ready', 'running', 'lost')),
    ADD COLUMN run_fence INTEGER CHECK (run_fence >= 2),
    ADD COLUMN reason TEXT CHECK (length(reason) BETWEEN 1 AND 1000),
    ADD COLUMN invocation_id TEXT,
    ADD COLUMN event_id TEXT UNIQUE REFERENCES workflow_events (id),
    -- Admission's mutations create; every later one names the status it left, its Run fence and its event.
    ADD CONSTRAINT workflow_step_mutations_created CHECK ((kind = 'create') = (from_status IS NULL)),
    ADD CONSTRAINT workflow_step_mutations_run_fenced CHECK ((kind = 'create') = (run_fence IS NULL)),
    ADD CONSTRAINT workflow_step_mutations_evented CHECK ((kind = 'create') = (event_id IS NULL)),
    ADD CONSTRAINT workflow_step_mutations_advance CHECK (kind = 'create' OR to_status IN ('ready', 'skipped') OR kind <> 'advance'),
    ADD CONSTRAINT workflow_step_mutations_invoked CHECK ((kind IN ('start', 'settle')) = (invocation_id IS NOT NULL));
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
    created_at  TIMESTAMPTZ NOT NULL,
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
    deadline_at     TIMESTAMPTZ NOT NULL,
    started_at      TIMESTAMPTZ NOT NULL,
    UNIQUE (step_run_id, step_fence),
    UNIQUE (step_run_id, attempt)
);
CREATE INDEX workflow_step_starts_by_run ON workflow_step_starts (run_id);
