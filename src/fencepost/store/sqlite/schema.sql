-- fencepost control schema, current definition (SQLite). Applying every file in migrations/
-- in order must yield exactly this schema: tests/store/test_migrations.py proves it.
-- Instants are fixed-width UTC text (2026-01-01T00:00:00.000000Z) so they sort in time order.

CREATE TABLE "commands" (
    id                TEXT PRIMARY KEY,
    kind              TEXT NOT NULL CHECK (length(kind) BETWEEN 1 AND 100),
    payload           TEXT NOT NULL CHECK (json_valid(payload)),
    status            TEXT NOT NULL CHECK (status IN ('PENDING', 'PROCESSING', 'DELIVERED', 'FAILED', 'ABORTED')),
    available_at      TEXT NOT NULL,
    created_at        TEXT NOT NULL,
    updated_at        TEXT NOT NULL,
    lease_owner       TEXT,
    lease_token       TEXT,
    lease_until       TEXT,
    last_heartbeat_at TEXT,
    delivery_count    INTEGER NOT NULL DEFAULT 0 CHECK (delivery_count >= 0),
    finished_at       TEXT,
    last_error        TEXT,
    -- A fenced claim exists exactly while PROCESSING; the token never outlives it.
    CHECK ((status = 'PROCESSING') = (lease_token IS NOT NULL)),
    CHECK ((status = 'PROCESSING') = (lease_owner IS NOT NULL AND lease_until IS NOT NULL)),
    CHECK ((status IN ('DELIVERED', 'FAILED', 'ABORTED')) = (finished_at IS NOT NULL)),
    -- Claimed at least once unless PENDING or ABORTED; a host invocation's command may be held by its
    -- inline caller at delivery 0 (migration 0004, ADR 0022: attempt_count counts worker claims only).
    CHECK (status = 'PENDING' OR delivery_count >= 1 OR status = 'ABORTED' OR kind LIKE 'host.invoke:%')
);

-- The payload is a JSON object (migration 0013, ADR 0094): every claim reads it back as one.
CREATE TRIGGER commands_payload_is_an_object_on_insert
BEFORE INSERT ON commands
WHEN json_valid(NEW.payload) AND json_type(NEW.payload) <> 'object'
BEGIN
    SELECT RAISE(ABORT, 'CHECK constraint failed: commands_payload_is_an_object');
END;

CREATE TRIGGER commands_payload_is_an_object_on_update
BEFORE UPDATE OF payload ON commands
WHEN json_valid(NEW.payload) AND json_type(NEW.payload) <> 'object'
BEGIN
    SELECT RAISE(ABORT, 'CHECK constraint failed: commands_payload_is_an_object');
END;

-- Claim scans are index-driven: due PENDING rows by available_at, expired PROCESSING rows by lease_until.
CREATE INDEX commands_pending_due ON commands (kind, available_at) WHERE status = 'PENDING';
CREATE INDEX commands_processing_lease ON commands (kind, lease_until) WHERE status = 'PROCESSING';

CREATE TABLE lease_events (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    command_id  TEXT NOT NULL REFERENCES commands (id),
    event       TEXT NOT NULL CHECK (event IN ('claim', 'takeover', 'heartbeat', 'release', 'reconcile',
                                               'abort', 'deliver', 'fail')),
    owner       TEXT,
    delivery    INTEGER NOT NULL CHECK (delivery >= 0),
    at          TEXT NOT NULL,
    lease_until TEXT
);
CREATE INDEX lease_events_by_command ON lease_events (command_id, seq);

CREATE TABLE rehearsal_runs (
    id               TEXT PRIMARY KEY,
    package_name     TEXT NOT NULL CHECK (length(package_name) BETWEEN 1 AND 100),
    package_version  TEXT NOT NULL CHECK (length(package_version) BETWEEN 1 AND 64),
    previous_version TEXT,
    content_digest   TEXT NOT NULL CHECK ((length(content_digest) = 71 AND substr(content_digest, 1, 7) = 'sha256:' AND NOT substr(content_digest, 8) GLOB '*[^0-9a-f]*')),
    manifest         TEXT NOT NULL CHECK (json_valid(manifest)),
    status           TEXT NOT NULL CHECK (status IN ('READY', 'RETIRED')),
    created_at       TEXT NOT NULL
);

-- The frozen package: every file's bytes, so later edits on disk never change what Attempts execute.
CREATE TABLE rehearsal_run_files (
    run_id  TEXT NOT NULL REFERENCES rehearsal_runs (id),
    path    TEXT NOT NULL CHECK (length(path) BETWEEN 1 AND 300),
    sha256  TEXT NOT NULL CHECK (length(sha256) = 71 AND substr(sha256, 1, 7) = 'sha256:'
                                 AND NOT substr(sha256, 8) GLOB '*[^0-9a-f]*'),
    size    INTEGER NOT NULL CHECK (size >= 0),
    content BLOB NOT NULL CHECK (length(content) = size),
    PRIMARY KEY (run_id, path)
);

CREATE TABLE rehearsal_attempts (
    id          TEXT PRIMARY KEY,
    run_id      TEXT NOT NULL REFERENCES rehearsal_runs (id),
    seq         INTEGER NOT NULL CHECK (seq >= 1),
    command_id  TEXT NOT NULL UNIQUE REFERENCES commands (id),
    status      TEXT NOT NULL CHECK (status IN ('PENDING', 'RUNNING', 'SUCCEEDED', 'FAILED', 'ABORTED')),
    delivery    INTEGER NOT NULL DEFAULT 0 CHECK (delivery >= 0),
    created_at  TEXT NOT NULL,
    started_at  TEXT,
    finished_at TEXT,
    error       TEXT,
    UNIQUE (run_id, seq),
    CHECK ((status IN ('SUCCEEDED', 'FAILED', 'ABORTED')) = (finished_at IS NOT NULL))
);

CREATE TABLE rehearsal_receipts (
    id                   TEXT PRIMARY KEY,
    attempt_id           TEXT NOT NULL REFERENCES rehearsal_attempts (id),
    position             INTEGER NOT NULL CHECK (position BETWEEN 1 AND 6),
    scenario             TEXT NOT NULL CHECK (length(scenario) BETWEEN 1 AND 64),
    status               TEXT NOT NULL CHECK (status IN ('PENDING', 'RUNNING', 'SUCCEEDED', 'FAILED', 'ABORTED')),
    delivery             INTEGER,
    evidence             TEXT CHECK (evidence IS NULL OR json_valid(evidence)),
    evidence_fingerprint TEXT CHECK (evidence_fingerprint IS NULL
                                     OR (length(evidence_fingerprint) = 71
                                         AND substr(evidence_fingerprint, 1, 7) = 'sha256:'
                                         AND NOT substr(evidence_fingerprint, 8) GLOB '*[^0-9a-f]*')),
    started_at           TEXT,
    finished_at          TEXT,
    UNIQUE (attempt_id, position),
    UNIQUE (attempt_id, scenario),
    CHECK ((evidence IS NULL) = (evidence_fingerprint IS NULL)),
    CHECK (status NOT IN ('SUCCEEDED', 'FAILED') OR evidence IS NOT NULL)
);

-- ── packages and workflow admission (ADR-0224) ──

CREATE TABLE package_publications (
    id                      TEXT PRIMARY KEY,
    package_name            TEXT NOT NULL CHECK (length(package_name) BETWEEN 1 AND 100),
    version                 TEXT NOT NULL CHECK (length(version) BETWEEN 1 AND 64),
    content_digest          TEXT NOT NULL CHECK ((length(content_digest) = 71 AND substr(content_digest, 1, 7) = 'sha256:' AND NOT substr(content_digest, 8) GLOB '*[^0-9a-f]*')),
    definition              TEXT NOT NULL CHECK (json_valid(definition) AND length(definition) <= 262144),
    definition_digest       TEXT NOT NULL CHECK ((length(definition_digest) = 71 AND substr(definition_digest, 1, 7) = 'sha256:' AND NOT substr(definition_digest, 8) GLOB '*[^0-9a-f]*')),
    status                  TEXT NOT NULL CHECK (status IN ('active', 'withdrawn')),
    gate                    TEXT NOT NULL CHECK (gate IN ('passed', 'waived')),
    gate_run_id             TEXT REFERENCES rehearsal_runs (id),
    previous_publication_id TEXT REFERENCES package_publications (id),
    published_at            TEXT NOT NULL,
    withdrawn_at            TEXT,
    UNIQUE (package_name, version),
    CHECK (json_extract(definition, '$.package') IS package_name),
    CHECK (json_extract(definition, '$.version') IS version),
    CHECK (json_extract(definition, '$.content_digest') IS content_digest),
    CHECK ((status = 'withdrawn') = (withdrawn_at IS NOT NULL)),
    CHECK ((gate = 'passed') = (gate_run_id IS NOT NULL))
);

-- Publishing looks up the rehearsals of the exact content being published.
CREATE INDEX rehearsal_runs_by_digest ON rehearsal_runs (content_digest);

-- The per-package head, moved only by compare-and-set on revision.
CREATE TABLE package_heads (
    package_name   TEXT PRIMARY KEY,
    publication_id TEXT NOT NULL REFERENCES package_publications (id),
    revision       INTEGER NOT NULL CHECK (revision >= 1),
    updated_at     TEXT NOT NULL
);

CREATE TABLE package_installations (
    id             TEXT PRIMARY KEY,
    package_name   TEXT NOT NULL UNIQUE CHECK (length(package_name) BETWEEN 1 AND 100),
    publication_id TEXT NOT NULL REFERENCES package_publications (id),
    lock_digest    TEXT NOT NULL CHECK ((length(lock_digest) = 71 AND substr(lock_digest, 1, 7) = 'sha256:' AND NOT substr(lock_digest, 8) GLOB '*[^0-9a-f]*')),
    status         TEXT NOT NULL CHECK (status IN ('active', 'uninstalled')),
    generation     INTEGER NOT NULL CHECK (generation >= 1),
    installed_at   TEXT NOT NULL,
    updated_at     TEXT NOT NULL
);

-- Lifecycle disposition; no row means active.
CREATE TABLE installation_dispositions (
    installation_id TEXT PRIMARY KEY REFERENCES package_installations (id),
    disposition     TEXT NOT NULL CHECK (disposition IN ('active', 'disabled')),
    reason          TEXT,
    updated_at      TEXT NOT NULL
);

-- Quarantine of an exact installation and lock; enable never clears it, only an explicit release does.
CREATE TABLE installation_quarantines (
    id              TEXT PRIMARY KEY,
    installation_id TEXT NOT NULL REFERENCES package_installations (id),
    lock_digest     TEXT NOT NULL CHECK ((length(lock_digest) = 71 AND substr(lock_digest, 1, 7) = 'sha256:' AND NOT substr(lock_digest, 8) GLOB '*[^0-9a-f]*')),
    reason          TEXT NOT NULL CHECK (length(reason) BETWEEN 1 AND 1000),
    quarantined_at  TEXT NOT NULL,
    released_at     TEXT,
    release_reason  TEXT,
    CHECK ((released_at IS NULL) = (release_reason IS NULL))
);
CREATE UNIQUE INDEX installation_quarantines_open
    ON installation_quarantines (installation_id, lock_digest) WHERE released_at IS NULL;

CREATE TABLE "workflow_runs" (
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
CREATE INDEX workflow_runs_cancelling ON workflow_runs (id) WHERE status = 'running' AND cancel_requested_at IS NOT NULL;

CREATE TABLE "workflow_step_runs" (
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
-- The coordinator's candidate pages: Runs with a step to start, or a step whose task may have a verdict.
CREATE INDEX workflow_step_runs_active ON workflow_step_runs (status, run_id) WHERE status IN ('ready', 'running', 'lost');

CREATE TABLE "workflow_events" (
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

CREATE TABLE "workflow_step_mutations" (
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
CREATE UNIQUE INDEX workflow_step_mutations_run_fence ON workflow_step_mutations (run_id, run_fence) WHERE run_fence IS NOT NULL;

-- The admission ledger: one row per admitted plan ...
CREATE TABLE workflow_admissions (
    plan_id         TEXT PRIMARY KEY CHECK (length(plan_id) BETWEEN 1 AND 128),
    plan_digest     TEXT NOT NULL CHECK ((length(plan_digest) = 71 AND substr(plan_digest, 1, 7) = 'sha256:' AND NOT substr(plan_digest, 8) GLOB '*[^0-9a-f]*')),
    plan            TEXT NOT NULL CHECK (json_valid(plan) AND length(plan) <= 262144),
    run_id          TEXT NOT NULL UNIQUE REFERENCES workflow_runs (id),
    package_name    TEXT NOT NULL,
    publication_id  TEXT NOT NULL REFERENCES package_publications (id),
    installation_id TEXT NOT NULL REFERENCES package_installations (id),
    lock_digest     TEXT NOT NULL CHECK ((length(lock_digest) = 71 AND substr(lock_digest, 1, 7) = 'sha256:' AND NOT substr(lock_digest, 8) GLOB '*[^0-9a-f]*')),
    workflow_id     TEXT NOT NULL,
    workflow_digest TEXT NOT NULL CHECK ((length(workflow_digest) = 71 AND substr(workflow_digest, 1, 7) = 'sha256:' AND NOT substr(workflow_digest, 8) GLOB '*[^0-9a-f]*')),
    step_count      INTEGER NOT NULL CHECK (step_count BETWEEN 1 AND 128),
    final_fence     INTEGER NOT NULL CHECK (final_fence >= 1),
    receipt_id      TEXT NOT NULL UNIQUE,
    admitted_at     TEXT NOT NULL,
    CHECK (json_extract(plan, '$.plan_id') IS plan_id),
    CHECK (json_extract(plan, '$.digest') IS plan_digest),
    CHECK (json_extract(plan, '$.package') IS package_name),
    CHECK (json_extract(plan, '$.publication_id') IS publication_id),
    CHECK (json_extract(plan, '$.installation_id') IS installation_id),
    CHECK (json_extract(plan, '$.lock') IS lock_digest),
    CHECK (json_extract(plan, '$.workflow_id') IS workflow_id),
    CHECK (json_extract(plan, '$.workflow_digest') IS workflow_digest),
    CHECK (json_array_length(plan, '$.steps') IS step_count)
);

-- ... and one row per step, binding task definition, needs, StepRun, mutation and event identity.
CREATE TABLE workflow_admission_steps (
    plan_id     TEXT NOT NULL REFERENCES workflow_admissions (plan_id),
    step_key    TEXT NOT NULL,
    task_id     TEXT NOT NULL,
    task_digest TEXT NOT NULL CHECK ((length(task_digest) = 71 AND substr(task_digest, 1, 7) = 'sha256:' AND NOT substr(task_digest, 8) GLOB '*[^0-9a-f]*')),
    needs       TEXT NOT NULL CHECK (json_valid(needs) AND json_type(needs) = 'array'),
    step_run_id TEXT NOT NULL UNIQUE REFERENCES workflow_step_runs (id),
    mutation_id TEXT NOT NULL UNIQUE REFERENCES workflow_step_mutations (id),
    event_id    TEXT NOT NULL UNIQUE REFERENCES workflow_events (id),
    PRIMARY KEY (plan_id, step_key)
);

CREATE TABLE workflow_admission_receipts (
    id             TEXT PRIMARY KEY,
    plan_id        TEXT NOT NULL UNIQUE REFERENCES workflow_admissions (plan_id),
    run_id         TEXT NOT NULL UNIQUE REFERENCES workflow_runs (id),
    receipt        TEXT NOT NULL CHECK (json_valid(receipt) AND length(receipt) <= 262144),
    receipt_digest TEXT NOT NULL CHECK ((length(receipt_digest) = 71 AND substr(receipt_digest, 1, 7) = 'sha256:' AND NOT substr(receipt_digest, 8) GLOB '*[^0-9a-f]*')),
    CHECK (json_extract(receipt, '$.receipt_id') IS id),
    CHECK (json_extract(receipt, '$.plan_id') IS plan_id),
    CHECK (json_extract(receipt, '$.run_id') IS run_id)
);

-- The worker registry (migration 0003, ADR 0019): one row per running worker process, renewed by its
-- heartbeat, deleted on stop, deleted by age once it stopped renewing.
CREATE TABLE workers (
    id                TEXT PRIMARY KEY CHECK (length(id) BETWEEN 1 AND 200),
    host              TEXT NOT NULL CHECK (length(host) BETWEEN 1 AND 255),
    pid               INTEGER NOT NULL CHECK (pid >= 1),
    kinds             TEXT NOT NULL CHECK (json_valid(kinds) AND json_type(kinds) = 'array'),
    concurrency       INTEGER NOT NULL CHECK (concurrency >= 1),
    in_flight         INTEGER NOT NULL CHECK (in_flight >= 0),
    heartbeat_seconds REAL NOT NULL CHECK (heartbeat_seconds > 0),
    version           TEXT NOT NULL CHECK (length(version) BETWEEN 1 AND 64),
    started_at        TEXT NOT NULL,
    last_seen_at      TEXT NOT NULL,
    CHECK (last_seen_at >= started_at)
);

-- The action host (migration 0004, ADRs 0022-0027): invocations, their adapter rows, the host event log and
-- its publication outbox.
CREATE TABLE invocations (
    id               TEXT PRIMARY KEY CHECK (length(id) BETWEEN 1 AND 100),
    tenant_id        TEXT NOT NULL CHECK (length(tenant_id) BETWEEN 1 AND 200),
    space_id         TEXT NOT NULL CHECK (length(space_id) BETWEEN 1 AND 200),
    action_id        TEXT NOT NULL CHECK (length(action_id) BETWEEN 1 AND 200),
    action_version   INTEGER NOT NULL CHECK (action_version >= 1),
    idempotency_key  TEXT NOT NULL CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    actor            TEXT NOT NULL CHECK (length(actor) BETWEEN 1 AND 200),
    authority        TEXT NOT NULL CHECK (length(authority) <= 200),
    binding_digest   TEXT NOT NULL CHECK (length(binding_digest) BETWEEN 5 AND 100),
    params_digest    TEXT NOT NULL CHECK (length(params_digest) BETWEEN 5 AND 100 AND instr(params_digest, ':') > 1),
    params           TEXT NOT NULL CHECK (json_valid(params) AND json_type(params) = 'object'),
    mode             TEXT NOT NULL CHECK (mode IN ('dispatch', 'inline')),
    status           TEXT NOT NULL CHECK (status IN ('pending', 'awaiting_approval', 'running', 'succeeded', 'failed', 'reconciliation_required')),
    error            TEXT,
    result           TEXT CHECK (result IS NULL OR json_valid(result)),
    reconciliation   TEXT CHECK (reconciliation IS NULL OR (json_valid(reconciliation) AND json_type(reconciliation) = 'object')),
    pending_completion TEXT CHECK (pending_completion IS NULL OR (json_valid(pending_completion) AND json_type(pending_completion) = 'object')),
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL,
    -- External completion handoffs (migration 0006, ADR 0034; host-spec N): added by ALTER TABLE, so they
    -- follow the last column and each cross-column CHECK sits on a column after those it names.
    handoff_provider TEXT CHECK (handoff_provider IS NULL OR length(handoff_provider) BETWEEN 1 AND 100),
    handoff_reference TEXT CHECK (handoff_reference IS NULL OR length(handoff_reference) BETWEEN 1 AND 500) CONSTRAINT invocations_handoff_pair CHECK ((handoff_provider IS NULL) = (handoff_reference IS NULL)),
    completion_due_at TEXT CONSTRAINT invocations_due_needs_handoff CHECK (completion_due_at IS NULL OR handoff_reference IS NOT NULL),
    parked_at TEXT CONSTRAINT invocations_parked_needs_handoff CHECK (parked_at IS NULL OR handoff_reference IS NOT NULL),
    overdue_at TEXT CONSTRAINT invocations_overdue_needs_handoff CHECK (overdue_at IS NULL OR handoff_reference IS NOT NULL),
    external_completion TEXT CHECK (external_completion IS NULL OR (json_valid(external_completion) AND json_type(external_completion) = 'object')),
    -- The state binding (migration 0011, ADR 0077; host-spec A19): the bound entity and the state a success
    -- records, all set or none; added by ALTER TABLE like the handoff columns.
    state_subject TEXT CHECK (state_subject IS NULL OR length(state_subject) BETWEEN 1 AND 100),
    state_entity_id TEXT CHECK (state_entity_id IS NULL OR length(state_entity_id) BETWEEN 1 AND 200),
    state_target TEXT CHECK (state_target IS NULL OR length(state_target) BETWEEN 1 AND 100) CONSTRAINT invocations_state_binding_whole CHECK ((state_subject IS NULL) = (state_entity_id IS NULL) AND (state_subject IS NULL) = (state_target IS NULL)),
    UNIQUE (tenant_id, space_id, action_id, idempotency_key),
    UNIQUE (tenant_id, space_id, id),
    CHECK (updated_at >= created_at)
);

CREATE INDEX invocations_by_status ON invocations (status, created_at);

-- A callback is matched by (provider, external reference) only (host-spec N30).
CREATE INDEX invocations_by_handoff ON invocations (handoff_provider, handoff_reference)
WHERE handoff_reference IS NOT NULL;

-- The deadline sweep (N12) scans running invocations by due time.
CREATE INDEX invocations_handoffs_due ON invocations (completion_due_at)
WHERE status = 'running' AND completion_due_at IS NOT NULL;

-- One row per adapter step of an invocation; its id is the step's adapter_invocation_id, the provider's
-- idempotency key (host-spec E2). The composite reference keeps a row in its parent's scope (I5).
CREATE TABLE adapter_invocations (
    id                 TEXT PRIMARY KEY CHECK (length(id) BETWEEN 1 AND 100),
    tenant_id          TEXT NOT NULL,
    space_id           TEXT NOT NULL,
    invocation_id      TEXT NOT NULL,
    step_index         INTEGER NOT NULL CHECK (step_index >= 0),
    step_name          TEXT NOT NULL CHECK (length(step_name) BETWEEN 1 AND 100),
    adapter_type       TEXT NOT NULL CHECK (length(adapter_type) BETWEEN 1 AND 100),
    operation          TEXT NOT NULL CHECK (length(operation) BETWEEN 1 AND 100),
    vendor             TEXT NOT NULL CHECK (length(vendor) BETWEEN 1 AND 100),
    input              TEXT NOT NULL CHECK (json_valid(input) AND json_type(input) = 'object'),
    output             TEXT CHECK (output IS NULL OR (json_valid(output) AND json_type(output) = 'object')),
    status             TEXT NOT NULL CHECK (status IN ('running', 'succeeded', 'failed', 'ambiguous')),
    error              TEXT,
    attempts           INTEGER NOT NULL CHECK (attempts >= 0),
    external_reference TEXT,
    reconciliation     TEXT CHECK (reconciliation IS NULL OR (json_valid(reconciliation) AND json_type(reconciliation) = 'object')),
    created_at         TEXT NOT NULL,
    updated_at         TEXT NOT NULL,
    UNIQUE (invocation_id, step_index),
    FOREIGN KEY (tenant_id, space_id, invocation_id) REFERENCES invocations (tenant_id, space_id, id),
    CHECK (updated_at >= created_at)
);

-- host-spec I7: a succeeded or ambiguous row never moves back to running or failed, whatever writes it.
CREATE TRIGGER adapter_invocations_no_regression
BEFORE UPDATE OF status ON adapter_invocations
WHEN OLD.status IN ('succeeded', 'ambiguous') AND NEW.status IN ('running', 'failed')
BEGIN
    SELECT RAISE(ABORT, 'adapter invocation status may not regress from succeeded or ambiguous');
END;

-- The host's event log (host-spec T1-T7): an event id is unique across the whole store and the first write
-- wins; sequence is per (tenant, space), assigned inside the appending transaction from
-- host_event_sequences (increasing; a lost race for one id may leave a gap).
CREATE TABLE host_event_sequences (
    tenant_id TEXT NOT NULL,
    space_id  TEXT NOT NULL,
    last      INTEGER NOT NULL CHECK (last >= 1),
    PRIMARY KEY (tenant_id, space_id)
);

CREATE TABLE host_events (
    id           TEXT PRIMARY KEY CHECK (length(id) BETWEEN 1 AND 100),
    tenant_id    TEXT NOT NULL CHECK (length(tenant_id) BETWEEN 1 AND 200),
    space_id     TEXT NOT NULL CHECK (length(space_id) BETWEEN 1 AND 200),
    sequence     INTEGER NOT NULL CHECK (sequence >= 1),
    subject_type TEXT NOT NULL CHECK (length(subject_type) BETWEEN 1 AND 100),
    subject_id   TEXT NOT NULL CHECK (length(subject_id) BETWEEN 1 AND 200),
    type         TEXT NOT NULL CHECK (length(type) BETWEEN 1 AND 100),
    occurred_at  TEXT NOT NULL,
    recorded_at  TEXT NOT NULL,
    payload      TEXT NOT NULL CHECK (json_valid(payload) AND json_type(payload) = 'object'),
    actor        TEXT CHECK (actor IS NULL OR (json_valid(actor) AND json_type(actor) = 'object')),
    UNIQUE (tenant_id, space_id, sequence)
);

CREATE INDEX host_events_by_subject ON host_events (subject_type, subject_id, sequence);

-- One row per event to publish, written only in the transaction whose event insert happened (T3). The
-- lifecycle columns are the relay's (issue 15): the outbox lease protocol, reused.
CREATE TABLE host_event_outbox (
    event_id     TEXT PRIMARY KEY REFERENCES host_events (id),
    destination  TEXT NOT NULL CHECK (length(destination) BETWEEN 1 AND 200),
    headers      TEXT NOT NULL CHECK (json_valid(headers) AND json_type(headers) = 'object'),
    status       TEXT NOT NULL CHECK (status IN ('pending', 'processing', 'published', 'retry_pending', 'dead_lettered')),
    attempts     INTEGER NOT NULL CHECK (attempts >= 0),
    lease_owner  TEXT,
    lease_token  TEXT,
    lease_until  TEXT,
    available_at TEXT NOT NULL,
    published_at TEXT,
    last_error   TEXT,
    created_at   TEXT NOT NULL,
    updated_at   TEXT NOT NULL
);

CREATE INDEX host_event_outbox_due ON host_event_outbox (status, available_at);

-- The reconciliation logs (migration 0005, ADR 0032; host-spec K1, L13): one append-only table for the
-- governance and the completion log, first write wins per (id, log), each entry in its parent's scope.
CREATE TABLE host_reconciliations (
    id                    TEXT NOT NULL CHECK (length(id) BETWEEN 1 AND 200),
    log                   TEXT NOT NULL CHECK (log IN ('governance', 'completion')),
    tenant_id             TEXT NOT NULL,
    space_id              TEXT NOT NULL,
    invocation_id         TEXT NOT NULL,
    adapter_invocation_id TEXT CHECK (adapter_invocation_id IS NULL OR length(adapter_invocation_id) BETWEEN 1 AND 100),
    kind                  TEXT NOT NULL CHECK (kind IN ('adapter_outcome_ambiguous', 'handler_decision_required', 'applied_effect', 'recovery_budget_exhausted', 'completion_overdue', 'completion_contradicted', 'completion_result_invalid')),
    payload               TEXT NOT NULL CHECK (json_valid(payload) AND json_type(payload) = 'object'),
    created_at            TEXT NOT NULL,
    PRIMARY KEY (id, log),
    -- The composite reference keeps an entry in its parent's scope (host-spec V1).
    FOREIGN KEY (tenant_id, space_id, invocation_id) REFERENCES invocations (tenant_id, space_id, id)
);

CREATE INDEX host_reconciliations_by_invocation ON host_reconciliations (invocation_id, created_at);

-- An operator and an auditor read the log as it was written: no statement may rewrite or remove an entry.
CREATE TRIGGER host_reconciliations_no_update
BEFORE UPDATE ON host_reconciliations
BEGIN
    SELECT RAISE(ABORT, 'host_reconciliations is append-only');
END;

CREATE TRIGGER host_reconciliations_no_delete
BEFORE DELETE ON host_reconciliations
BEGIN
    SELECT RAISE(ABORT, 'host_reconciliations is append-only');
END;

-- Operator resolutions (migration 0007, ADR 0048; host-spec §1.Y-13): one append-only row per resolved
-- reconciliation_required invocation, with a copy of the verdict it settles.
CREATE TABLE host_resolutions (
    id                   TEXT NOT NULL CHECK (length(id) BETWEEN 1 AND 100),
    tenant_id            TEXT NOT NULL,
    space_id             TEXT NOT NULL,
    invocation_id        TEXT PRIMARY KEY,
    outcome              TEXT NOT NULL CHECK (outcome IN ('succeeded', 'failed')),
    operator             TEXT NOT NULL CHECK (length(operator) BETWEEN 1 AND 200),
    note                 TEXT NOT NULL CHECK (length(note) BETWEEN 1 AND 2000),
    evidence             TEXT CHECK (evidence IS NULL OR (json_valid(evidence) AND json_type(evidence) = 'object')),
    prior_status         TEXT NOT NULL CHECK (prior_status IN ('reconciliation_required')),
    prior_error          TEXT,
    prior_reconciliation TEXT CHECK (prior_reconciliation IS NULL OR (json_valid(prior_reconciliation) AND json_type(prior_reconciliation) = 'object')),
    request_digest       TEXT NOT NULL CHECK (length(request_digest) BETWEEN 5 AND 100),
    created_at           TEXT NOT NULL,
    UNIQUE (id),
    -- The composite reference keeps a resolution in its invocation's scope (host-spec V1).
    FOREIGN KEY (tenant_id, space_id, invocation_id) REFERENCES invocations (tenant_id, space_id, id)
);

-- A resolution is history: no statement may rewrite or remove it.
CREATE TRIGGER host_resolutions_no_update
BEFORE UPDATE ON host_resolutions
BEGIN
    SELECT RAISE(ABORT, 'host_resolutions is append-only');
END;

CREATE TRIGGER host_resolutions_no_delete
BEFORE DELETE ON host_resolutions
BEGIN
    SELECT RAISE(ABORT, 'host_resolutions is append-only');
END;

-- The governance evidence (migration 0008, ADRs 0043-0045; host-spec D5, D6, O, P): one append-only table
-- of policy records, the mutation footprint, approval requests and decisions, obligations, their
-- satisfactions and attestations, first write wins per id, each record in its parent's scope.
CREATE TABLE host_governance_records (
    id            TEXT PRIMARY KEY CHECK (length(id) BETWEEN 1 AND 200),
    kind          TEXT NOT NULL CHECK (kind IN ('policy_record', 'mutation_footprint', 'approval_request', 'approval_decision', 'obligation', 'obligation_satisfied', 'attestation')),
    tenant_id     TEXT NOT NULL,
    space_id      TEXT NOT NULL,
    invocation_id TEXT NOT NULL,
    name          TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    payload       TEXT NOT NULL CHECK (json_valid(payload) AND json_type(payload) = 'object'),
    fingerprint   TEXT CHECK (fingerprint IS NULL OR length(fingerprint) BETWEEN 5 AND 100),
    created_at    TEXT NOT NULL,
    -- The composite reference keeps a record in its parent's scope (host-spec V1).
    FOREIGN KEY (tenant_id, space_id, invocation_id) REFERENCES invocations (tenant_id, space_id, id)
);

CREATE INDEX host_governance_records_by_invocation ON host_governance_records (invocation_id, created_at);

-- Policy and HITL evidence is read as it was written: no statement may rewrite or remove a record.
CREATE TRIGGER host_governance_records_no_update
BEFORE UPDATE ON host_governance_records
BEGIN
    SELECT RAISE(ABORT, 'host_governance_records is append-only');
END;

CREATE TRIGGER host_governance_records_no_delete
BEFORE DELETE ON host_governance_records
BEGIN
    SELECT RAISE(ABORT, 'host_governance_records is append-only');
END;

-- Delivery targets and delivery starts (migration 0009, ADRs 0055, 0056): a target by unique live name, URL
-- and labels; the start barrier row of each delivery invocation.
CREATE TABLE delivery_targets (
    id         TEXT PRIMARY KEY CHECK (length(id) BETWEEN 1 AND 100),
    name       TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 100),
    url        TEXT NOT NULL CHECK (length(url) BETWEEN 1 AND 2000),
    labels     TEXT NOT NULL CHECK (json_valid(labels) AND json_type(labels) = 'object'),
    added_at   TEXT NOT NULL,
    removed_at TEXT
);

-- One live target per name; a removed name may be added again.
CREATE UNIQUE INDEX delivery_targets_live_name ON delivery_targets (name) WHERE removed_at IS NULL;

CREATE TABLE delivery_starts (
    invocation_id   TEXT PRIMARY KEY CHECK (length(invocation_id) BETWEEN 1 AND 200),
    package_name    TEXT NOT NULL,
    version         TEXT NOT NULL,
    publication_id  TEXT NOT NULL,
    installation_id TEXT NOT NULL,
    lock_digest     TEXT NOT NULL,
    target_id       TEXT NOT NULL REFERENCES delivery_targets (id),
    started_at      TEXT NOT NULL
);

CREATE INDEX delivery_starts_by_package ON delivery_starts (package_name, target_id, started_at);

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

-- The recorded state of the entities actions are bound to (migration 0011, ADR 0077; host-spec A19): one row
-- per entity, the state, the state before the invocation that last changed it first changed it, and that
-- invocation, in its scope.
CREATE TABLE entity_states (
    tenant_id             TEXT NOT NULL,
    space_id              TEXT NOT NULL,
    subject               TEXT NOT NULL CHECK (length(subject) BETWEEN 1 AND 100),
    entity_id             TEXT NOT NULL CHECK (length(entity_id) BETWEEN 1 AND 200),
    state                 TEXT NOT NULL CHECK (length(state) BETWEEN 1 AND 100),
    previous_state        TEXT CHECK (previous_state IS NULL OR length(previous_state) BETWEEN 1 AND 100),
    updated_by_invocation TEXT NOT NULL,
    updated_at            TEXT NOT NULL,
    PRIMARY KEY (tenant_id, space_id, subject, entity_id),
    -- The composite reference keeps a recorded state in the scope of the invocation that set it (host-spec V1).
    FOREIGN KEY (tenant_id, space_id, updated_by_invocation) REFERENCES invocations (tenant_id, space_id, id)
);

-- The entities an invocation last changed (the audit, an operator's view).
CREATE INDEX entity_states_by_invocation ON entity_states (updated_by_invocation);

-- The store's identity (migration 0017, ADR 0108): one random id, inserted by that migration and never changed;
-- new invocation ids are derived from it, so two control databases never send a provider the same key.
CREATE TABLE store_identity (
    singleton  INTEGER PRIMARY KEY CHECK (singleton = 1),
    id         TEXT NOT NULL CHECK (length(id) = 32)
);
