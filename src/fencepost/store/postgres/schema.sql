-- fencepost control schema, current definition (PostgreSQL). Applying every file in migrations/
-- in order must yield exactly this schema: tests/store/test_migrations.py proves it.
-- Instants are TIMESTAMPTZ (sessions run in UTC); the database clock decides lease expiry.

-- Payload, manifest and evidence are TEXT holding canonical JSON (the exact text the SQLite store keeps,
-- so evidence fingerprints verify byte for byte on both backends). This function is the CHECK that the
-- text parses: a plain ``value::json`` cast in a CHECK would raise a data exception (22P02) instead of a
-- check violation, and PostgreSQL 15 has no ``IS JSON`` predicate. ``json`` (not ``jsonb``) mirrors SQLite's
-- json_valid: syntax only, so a ``\u0000`` escape is accepted.
-- PARALLEL UNSAFE, as every check function here with an EXCEPTION block: entering one starts a
-- subtransaction, which a parallel worker cannot (migration 0016).
CREATE FUNCTION fencepost_is_json(value text) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL UNSAFE AS $$
BEGIN
    PERFORM value::json;
    RETURN true;
EXCEPTION WHEN data_exception THEN
    RETURN false;
END;
$$;

CREATE TABLE commands (
    id                TEXT PRIMARY KEY,
    kind              TEXT NOT NULL CHECK (length(kind) BETWEEN 1 AND 100),
    payload           TEXT NOT NULL,  -- a JSON object: checked by commands_payload_is_json below (ADRs 0091, 0094)
    status            TEXT NOT NULL CHECK (status IN ('PENDING', 'PROCESSING', 'DELIVERED', 'FAILED', 'ABORTED')),
    available_at      TIMESTAMPTZ NOT NULL,
    created_at        TIMESTAMPTZ NOT NULL,
    updated_at        TIMESTAMPTZ NOT NULL,
    lease_owner       TEXT,
    lease_token       TEXT,
    lease_until       TIMESTAMPTZ,
    last_heartbeat_at TIMESTAMPTZ,
    delivery_count    INTEGER NOT NULL DEFAULT 0 CHECK (delivery_count >= 0),
    finished_at       TIMESTAMPTZ,
    last_error        TEXT,
    -- A fenced claim exists exactly while PROCESSING; the token never outlives it.
    CONSTRAINT commands_token_iff_processing CHECK ((status = 'PROCESSING') = (lease_token IS NOT NULL)),
    CONSTRAINT commands_lease_iff_processing
        CHECK ((status = 'PROCESSING') = (lease_owner IS NOT NULL AND lease_until IS NOT NULL)),
    CONSTRAINT commands_finished_iff_terminal
        CHECK ((status IN ('DELIVERED', 'FAILED', 'ABORTED')) = (finished_at IS NOT NULL)),
    -- A host invocation's command may be held by its inline caller at delivery 0 (migration 0004, ADR 0022).
    CONSTRAINT commands_delivered_once
        CHECK (status = 'PENDING' OR delivery_count >= 1 OR status = 'ABORTED' OR kind LIKE 'host.invoke:%')
);

-- Claim scans are index-driven: due PENDING rows by available_at, expired PROCESSING rows by lease_until.
CREATE INDEX commands_pending_due ON commands (kind, available_at) WHERE status = 'PENDING';
CREATE INDEX commands_processing_lease ON commands (kind, lease_until) WHERE status = 'PROCESSING';

-- The payload's JSON check, run only by the writes that can change it (a CHECK runs on every UPDATE of the row:
-- each claim, heartbeat and completion). Same SQLSTATE and constraint name as the CHECK it replaced (ADR 0091).
CREATE FUNCTION fencepost_commands_payload_is_json() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- Casts itself rather than calling fencepost_is_json: PL/pgSQL resolves a function name through the
    -- writing session's search_path, which need not list this schema (the CHECK was bound when created).
    IF pg_catalog.json_typeof(NEW.payload::pg_catalog.json) <> 'object' THEN
        RAISE EXCEPTION 'new row for relation "commands" violates check constraint "commands_payload_check"'
            USING ERRCODE = 'check_violation', TABLE = 'commands', COLUMN = 'payload',
                  CONSTRAINT = 'commands_payload_check', DETAIL = 'The payload is not a JSON object.';
    END IF;
    RETURN NEW;
EXCEPTION WHEN data_exception THEN
    RAISE EXCEPTION 'new row for relation "commands" violates check constraint "commands_payload_check"'
        USING ERRCODE = 'check_violation', TABLE = 'commands', COLUMN = 'payload',
              CONSTRAINT = 'commands_payload_check';
END;
$$;

CREATE TRIGGER commands_payload_is_json BEFORE INSERT OR UPDATE OF payload ON commands
    FOR EACH ROW EXECUTE FUNCTION fencepost_commands_payload_is_json();

CREATE TABLE lease_events (
    seq         BIGINT GENERATED ALWAYS AS IDENTITY,
    -- Not a foreign key: written only with the change it records; `fencepost audit` checks it (ADR 0091).
    command_id  TEXT NOT NULL,
    event       TEXT NOT NULL CHECK (event IN ('claim', 'takeover', 'heartbeat', 'release', 'reconcile',
                                               'abort', 'deliver', 'fail')),
    owner       TEXT,
    delivery    INTEGER NOT NULL CHECK (delivery >= 0),
    at          TIMESTAMPTZ NOT NULL,
    lease_until TIMESTAMPTZ,
    -- Every read names one command and orders by seq: one B-tree entry per history row (ADR 0097).
    CONSTRAINT lease_events_pkey PRIMARY KEY (command_id, seq)
);

CREATE TABLE rehearsal_runs (
    id               TEXT PRIMARY KEY,
    package_name     TEXT NOT NULL CHECK (length(package_name) BETWEEN 1 AND 100),
    package_version  TEXT NOT NULL CHECK (length(package_version) BETWEEN 1 AND 64),
    previous_version TEXT,
    content_digest   TEXT NOT NULL CHECK (content_digest ~ '^sha256:[0-9a-f]{64}$'),
    manifest         TEXT NOT NULL CHECK (fencepost_is_json(manifest)),
    status           TEXT NOT NULL CHECK (status IN ('READY', 'RETIRED')),
    created_at       TIMESTAMPTZ NOT NULL
);

-- The frozen package: every file's bytes, so later edits on disk never change what Attempts execute.
CREATE TABLE rehearsal_run_files (
    run_id  TEXT NOT NULL REFERENCES rehearsal_runs (id),
    path    TEXT NOT NULL CHECK (length(path) BETWEEN 1 AND 300),
    sha256  TEXT NOT NULL CHECK (sha256 ~ '^sha256:[0-9a-f]{64}$'),
    size    BIGINT NOT NULL CHECK (size >= 0),
    content BYTEA NOT NULL CHECK (octet_length(content) = size),
    PRIMARY KEY (run_id, path)
);

CREATE TABLE rehearsal_attempts (
    id          TEXT PRIMARY KEY,
    run_id      TEXT NOT NULL REFERENCES rehearsal_runs (id),
    seq         INTEGER NOT NULL CHECK (seq >= 1),
    command_id  TEXT NOT NULL UNIQUE REFERENCES commands (id),
    status      TEXT NOT NULL CHECK (status IN ('PENDING', 'RUNNING', 'SUCCEEDED', 'FAILED', 'ABORTED')),
    delivery    INTEGER NOT NULL DEFAULT 0 CHECK (delivery >= 0),
    created_at  TIMESTAMPTZ NOT NULL,
    started_at  TIMESTAMPTZ,
    finished_at TIMESTAMPTZ,
    error       TEXT,
    UNIQUE (run_id, seq),
    CONSTRAINT rehearsal_attempts_finished_iff_terminal
        CHECK ((status IN ('SUCCEEDED', 'FAILED', 'ABORTED')) = (finished_at IS NOT NULL))
);

CREATE TABLE rehearsal_receipts (
    id                   TEXT PRIMARY KEY,
    attempt_id           TEXT NOT NULL REFERENCES rehearsal_attempts (id),
    position             INTEGER NOT NULL CHECK (position BETWEEN 1 AND 6),
    scenario             TEXT NOT NULL CHECK (length(scenario) BETWEEN 1 AND 64),
    status               TEXT NOT NULL CHECK (status IN ('PENDING', 'RUNNING', 'SUCCEEDED', 'FAILED', 'ABORTED')),
    delivery             INTEGER,
    evidence             TEXT CHECK (evidence IS NULL OR fencepost_is_json(evidence)),
    evidence_fingerprint TEXT CHECK (evidence_fingerprint IS NULL
                                     OR evidence_fingerprint ~ '^sha256:[0-9a-f]{64}$'),
    started_at           TIMESTAMPTZ,
    finished_at          TIMESTAMPTZ,
    UNIQUE (attempt_id, position),
    UNIQUE (attempt_id, scenario),
    CONSTRAINT rehearsal_receipts_evidence_with_fingerprint
        CHECK ((evidence IS NULL) = (evidence_fingerprint IS NULL)),
    CONSTRAINT rehearsal_receipts_outcome_has_evidence
        CHECK (status NOT IN ('SUCCEEDED', 'FAILED') OR evidence IS NOT NULL)
);

-- next_attempt_seq: SQLite serializes every write transaction, so "max(seq) + 1, then insert" cannot race
-- there. Under READ COMMITTED two enqueues for one Run would both read the same max and one would fail
-- UNIQUE (run_id, seq). This takes the Run row lock first (parent before child) and then reads max(seq) in
-- a fresh snapshot (a VOLATILE function takes one per statement), so the second enqueue waits for the
-- first and gets the next number. In a read-only transaction it only reads.
CREATE FUNCTION fencepost_next_attempt_seq(p_run_id text) RETURNS integer
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF current_setting('transaction_read_only') = 'off' THEN
        PERFORM 1 FROM rehearsal_runs WHERE id = p_run_id FOR NO KEY UPDATE;
    END IF;
    RETURN (SELECT coalesce(max(seq), 0) + 1 FROM rehearsal_attempts WHERE run_id = p_run_id);
END;
$$;

-- ── packages and workflow admission (ADR-0224) ──

-- A field of a JSON text, or NULL when the text does not parse (the CHECK on the text itself reports that).
CREATE FUNCTION fencepost_json_field(doc text, path text[]) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL UNSAFE AS $$
BEGIN
    RETURN doc::json #>> path;
EXCEPTION WHEN data_exception THEN
    RETURN NULL;
END;
$$;

CREATE FUNCTION fencepost_json_array_length(doc text, path text[]) RETURNS integer
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL UNSAFE AS $$
BEGIN
    RETURN json_array_length(doc::json #> path);
EXCEPTION WHEN data_exception OR invalid_parameter_value THEN
    RETURN NULL;
END;
$$;

CREATE TABLE package_publications (
    id                      TEXT PRIMARY KEY,
    package_name            TEXT NOT NULL CHECK (length(package_name) BETWEEN 1 AND 100),
    version                 TEXT NOT NULL CHECK (length(version) BETWEEN 1 AND 64),
    content_digest          TEXT NOT NULL CHECK (content_digest ~ '^sha256:[0-9a-f]{64}$'),
    definition              TEXT NOT NULL CHECK (fencepost_is_json(definition) AND length(definition) <= 262144),
    definition_digest       TEXT NOT NULL CHECK (definition_digest ~ '^sha256:[0-9a-f]{64}$'),
    status                  TEXT NOT NULL CHECK (status IN ('active', 'withdrawn')),
    gate                    TEXT NOT NULL CHECK (gate IN ('passed', 'waived')),
    gate_run_id             TEXT REFERENCES rehearsal_runs (id),
    previous_publication_id TEXT REFERENCES package_publications (id),
    published_at            TIMESTAMPTZ NOT NULL,
    withdrawn_at            TIMESTAMPTZ,
    UNIQUE (package_name, version),
    CHECK (fencepost_json_field(definition, '{package}') IS NOT DISTINCT FROM package_name),
    CHECK (fencepost_json_field(definition, '{version}') IS NOT DISTINCT FROM version),
    CHECK (fencepost_json_field(definition, '{content_digest}') IS NOT DISTINCT FROM content_digest),
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
    updated_at     TIMESTAMPTZ NOT NULL
);

CREATE TABLE package_installations (
    id             TEXT PRIMARY KEY,
    package_name   TEXT NOT NULL UNIQUE CHECK (length(package_name) BETWEEN 1 AND 100),
    publication_id TEXT NOT NULL REFERENCES package_publications (id),
    lock_digest    TEXT NOT NULL CHECK (lock_digest ~ '^sha256:[0-9a-f]{64}$'),
    status         TEXT NOT NULL CHECK (status IN ('active', 'uninstalled')),
    generation     INTEGER NOT NULL CHECK (generation >= 1),
    installed_at   TIMESTAMPTZ NOT NULL,
    updated_at     TIMESTAMPTZ NOT NULL
);

-- Lifecycle disposition; no row means active.
CREATE TABLE installation_dispositions (
    installation_id TEXT PRIMARY KEY REFERENCES package_installations (id),
    disposition     TEXT NOT NULL CHECK (disposition IN ('active', 'disabled')),
    reason          TEXT,
    updated_at      TIMESTAMPTZ NOT NULL
);

-- Quarantine of an exact installation and lock; enable never clears it, only an explicit release does.
CREATE TABLE installation_quarantines (
    id              TEXT PRIMARY KEY,
    installation_id TEXT NOT NULL REFERENCES package_installations (id),
    lock_digest     TEXT NOT NULL CHECK (lock_digest ~ '^sha256:[0-9a-f]{64}$'),
    reason          TEXT NOT NULL CHECK (length(reason) BETWEEN 1 AND 1000),
    quarantined_at  TIMESTAMPTZ NOT NULL,
    released_at     TIMESTAMPTZ,
    release_reason  TEXT,
    CHECK ((released_at IS NULL) = (release_reason IS NULL))
);
CREATE UNIQUE INDEX installation_quarantines_open
    ON installation_quarantines (installation_id, lock_digest) WHERE released_at IS NULL;

CREATE TABLE workflow_runs (
    id              TEXT PRIMARY KEY,
    plan_id         TEXT NOT NULL UNIQUE,
    installation_id TEXT NOT NULL REFERENCES package_installations (id),
    publication_id  TEXT NOT NULL REFERENCES package_publications (id),
    workflow_id     TEXT NOT NULL,
    status          TEXT NOT NULL CHECK (status IN ('running', 'succeeded', 'failed', 'cancelled', 'timed_out')),
    fence           INTEGER NOT NULL CHECK (fence >= 1),
    created_at      TIMESTAMPTZ NOT NULL,
    cancel_requested_at TIMESTAMPTZ,
    cancel_reason   TEXT CHECK (length(cancel_reason) BETWEEN 1 AND 1000),
    settled_at      TIMESTAMPTZ,
    CONSTRAINT workflow_runs_cancel_pair CHECK ((cancel_requested_at IS NULL) = (cancel_reason IS NULL)),
    CONSTRAINT workflow_runs_settled CHECK ((status = 'running') = (settled_at IS NULL))
);
CREATE INDEX workflow_runs_cancelling ON workflow_runs (id) WHERE status = 'running' AND cancel_requested_at IS NOT NULL;

CREATE TABLE workflow_step_runs (
    id          TEXT PRIMARY KEY,
    run_id      TEXT NOT NULL REFERENCES workflow_runs (id),
    step_key    TEXT NOT NULL CHECK (length(step_key) BETWEEN 1 AND 64),
    task_id     TEXT NOT NULL,
    task_digest TEXT NOT NULL CHECK (task_digest ~ '^sha256:[0-9a-f]{64}$'),
    needs       TEXT NOT NULL CHECK (fencepost_json_array_length(needs, '{}') IS NOT NULL),
    status      TEXT NOT NULL CHECK (status IN ('waiting', 'ready', 'running', 'lost', 'succeeded', 'failed', 'skipped', 'cancelled', 'timed_out')),
    fence       INTEGER NOT NULL CHECK (fence >= 1),
    created_at  TIMESTAMPTZ NOT NULL,
    UNIQUE (run_id, step_key)
);
-- The coordinator's candidate pages: Runs with a step to start, or a step whose task may have a verdict.
CREATE INDEX workflow_step_runs_active ON workflow_step_runs (status, run_id) WHERE status IN ('ready', 'running', 'lost');

CREATE TABLE workflow_events (
    id          TEXT PRIMARY KEY,
    run_id      TEXT NOT NULL REFERENCES workflow_runs (id),
    step_run_id TEXT REFERENCES workflow_step_runs (id),
    seq         INTEGER NOT NULL CHECK (seq >= 1),
    type        TEXT NOT NULL CHECK (type IN ('workflow.admitted', 'workflow.cancel_requested', 'workflow.succeeded', 'workflow.failed', 'workflow.cancelled', 'workflow.timed_out', 'step.created', 'step.ready', 'step.running', 'step.lost', 'step.succeeded', 'step.failed', 'step.skipped', 'step.cancelled', 'step.timed_out')),
    payload     TEXT NOT NULL CHECK (fencepost_is_json(payload) AND length(payload) <= 65536),
    created_at  TIMESTAMPTZ NOT NULL,
    UNIQUE (run_id, seq),
    CHECK ((substr(type, 1, 5) = 'step.') = (step_run_id IS NOT NULL)),
    CHECK (fencepost_json_field(payload, '{run_id}') IS NOT DISTINCT FROM run_id)
);

CREATE TABLE workflow_step_mutations (
    id          TEXT PRIMARY KEY,
    step_run_id TEXT NOT NULL REFERENCES workflow_step_runs (id),
    run_id      TEXT NOT NULL REFERENCES workflow_runs (id),
    fence       INTEGER NOT NULL CHECK (fence >= 1),
    kind        TEXT NOT NULL CHECK (kind IN ('create', 'advance', 'start', 'settle', 'cancel', 'refuse')),
    to_status   TEXT NOT NULL CHECK (to_status IN ('waiting', 'ready', 'running', 'lost', 'succeeded', 'failed', 'skipped', 'cancelled', 'timed_out')),
    created_at  TIMESTAMPTZ NOT NULL,
    from_status TEXT CHECK (from_status IN ('waiting', 'ready', 'running', 'lost')),
    run_fence   INTEGER CHECK (run_fence >= 2),
    reason      TEXT CHECK (length(reason) BETWEEN 1 AND 1000),
    invocation_id TEXT,
    event_id    TEXT UNIQUE REFERENCES workflow_events (id),
    UNIQUE (step_run_id, fence),
    -- Admission's mutations create; every later one names the status it left, its Run fence and its event.
    CONSTRAINT workflow_step_mutations_created CHECK ((kind = 'create') = (from_status IS NULL)),
    CONSTRAINT workflow_step_mutations_run_fenced CHECK ((kind = 'create') = (run_fence IS NULL)),
    CONSTRAINT workflow_step_mutations_evented CHECK ((kind = 'create') = (event_id IS NULL)),
    CONSTRAINT workflow_step_mutations_advance CHECK (kind = 'create' OR to_status IN ('ready', 'skipped') OR kind <> 'advance'),
    CONSTRAINT workflow_step_mutations_invoked CHECK ((kind IN ('start', 'settle')) = (invocation_id IS NOT NULL))
);
CREATE UNIQUE INDEX workflow_step_mutations_run_fence ON workflow_step_mutations (run_id, run_fence) WHERE run_fence IS NOT NULL;

-- The admission ledger: one row per admitted plan ...
CREATE TABLE workflow_admissions (
    plan_id         TEXT PRIMARY KEY CHECK (length(plan_id) BETWEEN 1 AND 128),
    plan_digest     TEXT NOT NULL CHECK (plan_digest ~ '^sha256:[0-9a-f]{64}$'),
    plan            TEXT NOT NULL CHECK (fencepost_is_json(plan) AND length(plan) <= 262144),
    run_id          TEXT NOT NULL UNIQUE REFERENCES workflow_runs (id),
    package_name    TEXT NOT NULL,
    publication_id  TEXT NOT NULL REFERENCES package_publications (id),
    installation_id TEXT NOT NULL REFERENCES package_installations (id),
    lock_digest     TEXT NOT NULL CHECK (lock_digest ~ '^sha256:[0-9a-f]{64}$'),
    workflow_id     TEXT NOT NULL,
    workflow_digest TEXT NOT NULL CHECK (workflow_digest ~ '^sha256:[0-9a-f]{64}$'),
    step_count      INTEGER NOT NULL CHECK (step_count BETWEEN 1 AND 128),
    final_fence     INTEGER NOT NULL CHECK (final_fence >= 1),
    receipt_id      TEXT NOT NULL UNIQUE,
    admitted_at     TIMESTAMPTZ NOT NULL,
    CHECK (fencepost_json_field(plan, '{plan_id}') IS NOT DISTINCT FROM plan_id),
    CHECK (fencepost_json_field(plan, '{digest}') IS NOT DISTINCT FROM plan_digest),
    CHECK (fencepost_json_field(plan, '{package}') IS NOT DISTINCT FROM package_name),
    CHECK (fencepost_json_field(plan, '{publication_id}') IS NOT DISTINCT FROM publication_id),
    CHECK (fencepost_json_field(plan, '{installation_id}') IS NOT DISTINCT FROM installation_id),
    CHECK (fencepost_json_field(plan, '{lock}') IS NOT DISTINCT FROM lock_digest),
    CHECK (fencepost_json_field(plan, '{workflow_id}') IS NOT DISTINCT FROM workflow_id),
    CHECK (fencepost_json_field(plan, '{workflow_digest}') IS NOT DISTINCT FROM workflow_digest),
    CHECK (fencepost_json_array_length(plan, '{steps}') IS NOT DISTINCT FROM step_count)
);

-- ... and one row per step, binding task definition, needs, StepRun, mutation and event identity.
CREATE TABLE workflow_admission_steps (
    plan_id     TEXT NOT NULL REFERENCES workflow_admissions (plan_id),
    step_key    TEXT NOT NULL,
    task_id     TEXT NOT NULL,
    task_digest TEXT NOT NULL CHECK (task_digest ~ '^sha256:[0-9a-f]{64}$'),
    needs       TEXT NOT NULL CHECK (fencepost_json_array_length(needs, '{}') IS NOT NULL),
    step_run_id TEXT NOT NULL UNIQUE REFERENCES workflow_step_runs (id),
    mutation_id TEXT NOT NULL UNIQUE REFERENCES workflow_step_mutations (id),
    event_id    TEXT NOT NULL UNIQUE REFERENCES workflow_events (id),
    PRIMARY KEY (plan_id, step_key)
);

CREATE TABLE workflow_admission_receipts (
    id             TEXT PRIMARY KEY,
    plan_id        TEXT NOT NULL UNIQUE REFERENCES workflow_admissions (plan_id),
    run_id         TEXT NOT NULL UNIQUE REFERENCES workflow_runs (id),
    receipt        TEXT NOT NULL CHECK (fencepost_is_json(receipt) AND length(receipt) <= 262144),
    receipt_digest TEXT NOT NULL CHECK (receipt_digest ~ '^sha256:[0-9a-f]{64}$'),
    CHECK (fencepost_json_field(receipt, '{receipt_id}') IS NOT DISTINCT FROM id),
    CHECK (fencepost_json_field(receipt, '{plan_id}') IS NOT DISTINCT FROM plan_id),
    CHECK (fencepost_json_field(receipt, '{run_id}') IS NOT DISTINCT FROM run_id)
);

-- The worker registry (migration 0003, ADR 0019): one row per running worker process, renewed by its
-- heartbeat, deleted on stop, deleted by age once it stopped renewing.
CREATE TABLE workers (
    id                TEXT PRIMARY KEY CHECK (length(id) BETWEEN 1 AND 200),
    host              TEXT NOT NULL CHECK (length(host) BETWEEN 1 AND 255),
    pid               INTEGER NOT NULL CHECK (pid >= 1),
    kinds             TEXT NOT NULL CHECK (fencepost_json_array_length(kinds, '{}') IS NOT NULL),
    concurrency       INTEGER NOT NULL CHECK (concurrency >= 1),
    in_flight         INTEGER NOT NULL CHECK (in_flight >= 0),
    heartbeat_seconds DOUBLE PRECISION NOT NULL CHECK (heartbeat_seconds > 0),
    version           TEXT NOT NULL CHECK (length(version) BETWEEN 1 AND 64),
    started_at        TIMESTAMPTZ NOT NULL,
    last_seen_at      TIMESTAMPTZ NOT NULL,
    CHECK (last_seen_at >= started_at)
);

-- The action host (migration 0004, ADRs 0022-0027): invocations, their adapter rows, the host event log and
-- its publication outbox.
CREATE FUNCTION fencepost_is_json_object(doc text) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL UNSAFE AS $$
BEGIN
    RETURN json_typeof(doc::json) = 'object';
EXCEPTION WHEN data_exception THEN
    RETURN false;
END;
$$;

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
    params_digest    TEXT NOT NULL CHECK (length(params_digest) BETWEEN 5 AND 100 AND position(':' in params_digest) > 1),
    params           TEXT NOT NULL CHECK (fencepost_is_json_object(params)),
    mode             TEXT NOT NULL CHECK (mode IN ('dispatch', 'inline')),
    status           TEXT NOT NULL CHECK (status IN ('pending', 'awaiting_approval', 'running', 'succeeded', 'failed', 'reconciliation_required')),
    error            TEXT,
    result           TEXT CHECK (result IS NULL OR fencepost_is_json(result)),
    reconciliation   TEXT CHECK (reconciliation IS NULL OR (fencepost_is_json_object(reconciliation))),
    pending_completion TEXT CHECK (pending_completion IS NULL OR (fencepost_is_json_object(pending_completion))),
    created_at       TIMESTAMPTZ NOT NULL,
    updated_at       TIMESTAMPTZ NOT NULL,
    -- External completion handoffs (migration 0006, ADR 0034; host-spec N): added by ALTER TABLE, so they
    -- follow the last column.
    handoff_provider TEXT CHECK (handoff_provider IS NULL OR length(handoff_provider) BETWEEN 1 AND 100),
    handoff_reference TEXT CHECK (handoff_reference IS NULL OR length(handoff_reference) BETWEEN 1 AND 500),
    completion_due_at TIMESTAMPTZ,
    parked_at        TIMESTAMPTZ,
    overdue_at       TIMESTAMPTZ,
    external_completion TEXT CHECK (external_completion IS NULL OR fencepost_is_json_object(external_completion)),
    -- The state binding (migration 0011, ADR 0077; host-spec A19): the bound entity and the state a success
    -- records, all set or none; added by ALTER TABLE, after the handoff columns.
    state_subject TEXT CHECK (state_subject IS NULL OR length(state_subject) BETWEEN 1 AND 100),
    state_entity_id TEXT CHECK (state_entity_id IS NULL OR length(state_entity_id) BETWEEN 1 AND 200),
    state_target TEXT CHECK (state_target IS NULL OR length(state_target) BETWEEN 1 AND 100),
    UNIQUE (tenant_id, space_id, action_id, idempotency_key),
    UNIQUE (tenant_id, space_id, id),
    CHECK (updated_at >= created_at),
    -- A handoff is a provider and its reference together; its instants exist only with it.
    CONSTRAINT invocations_handoff_pair CHECK ((handoff_provider IS NULL) = (handoff_reference IS NULL)),
    CONSTRAINT invocations_due_needs_handoff CHECK (completion_due_at IS NULL OR handoff_reference IS NOT NULL),
    CONSTRAINT invocations_parked_needs_handoff CHECK (parked_at IS NULL OR handoff_reference IS NOT NULL),
    CONSTRAINT invocations_overdue_needs_handoff CHECK (overdue_at IS NULL OR handoff_reference IS NOT NULL),
    CONSTRAINT invocations_state_binding_whole
        CHECK ((state_subject IS NULL) = (state_entity_id IS NULL) AND (state_subject IS NULL) = (state_target IS NULL))
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
    input              TEXT NOT NULL CHECK (fencepost_is_json_object(input)),
    output             TEXT CHECK (output IS NULL OR (fencepost_is_json_object(output))),
    status             TEXT NOT NULL CHECK (status IN ('running', 'succeeded', 'failed', 'ambiguous')),
    error              TEXT,
    attempts           INTEGER NOT NULL CHECK (attempts >= 0),
    external_reference TEXT,
    reconciliation     TEXT CHECK (reconciliation IS NULL OR (fencepost_is_json_object(reconciliation))),
    created_at         TIMESTAMPTZ NOT NULL,
    updated_at         TIMESTAMPTZ NOT NULL,
    UNIQUE (invocation_id, step_index),
    FOREIGN KEY (tenant_id, space_id, invocation_id) REFERENCES invocations (tenant_id, space_id, id),
    CHECK (updated_at >= created_at)
);

-- host-spec I7: a succeeded or ambiguous row never moves back to running or failed, whatever writes it.
CREATE FUNCTION fencepost_adapter_no_regression() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.status IN ('succeeded', 'ambiguous') AND NEW.status IN ('running', 'failed') THEN
        RAISE EXCEPTION 'adapter invocation status may not regress from succeeded or ambiguous'
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER adapter_invocations_no_regression
BEFORE UPDATE OF status ON adapter_invocations
FOR EACH ROW EXECUTE FUNCTION fencepost_adapter_no_regression();

-- The host's event log (host-spec T1-T7): an event id is unique across the whole store and the first write
-- wins; sequence is per (tenant, space), taken from host_event_sequences as the appending transaction commits
-- (ADR 0096: a deferred constraint trigger; NULL only until then, so sequence order is commit order).
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
    sequence     INTEGER CHECK (sequence >= 1),
    subject_type TEXT NOT NULL CHECK (length(subject_type) BETWEEN 1 AND 100),
    subject_id   TEXT NOT NULL CHECK (length(subject_id) BETWEEN 1 AND 200),
    type         TEXT NOT NULL CHECK (length(type) BETWEEN 1 AND 100),
    occurred_at  TIMESTAMPTZ NOT NULL,
    recorded_at  TIMESTAMPTZ NOT NULL,
    payload      TEXT NOT NULL CHECK (fencepost_is_json_object(payload)),
    actor        TEXT CHECK (actor IS NULL OR (fencepost_is_json_object(actor))),
    UNIQUE (tenant_id, space_id, sequence)
);

CREATE INDEX host_events_by_subject ON host_events (subject_type, subject_id, sequence);

-- The space's next sequence, taken at COMMIT: the host_event_sequences row is locked for the commit only, not
-- for the rest of the appending transaction (ADR 0096). Bound to the schema it is created in, or naming the
-- event's own schema where that was renamed since: a trigger runs in the writing session, whose search_path
-- need not find this schema's tables first.
CREATE FUNCTION fencepost_event_sequence_at_commit() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    taken INTEGER;
BEGIN
    IF TG_TABLE_SCHEMA IS DISTINCT FROM current_schema() THEN
        -- Not bound to the event's schema (renamed since it was bound): name it, at the price of planning here.
        EXECUTE format('INSERT INTO %1$I.host_event_sequences AS s (tenant_id, space_id, last) VALUES ($1, $2, 1) '
                       'ON CONFLICT (tenant_id, space_id) DO UPDATE SET last = s.last + 1 RETURNING s.last',
                       TG_TABLE_SCHEMA)
            INTO taken USING NEW.tenant_id, NEW.space_id;
        EXECUTE format('UPDATE %1$I.host_events SET sequence = $1 WHERE id = $2', TG_TABLE_SCHEMA)
            USING taken, NEW.id;
        RETURN NULL;
    END IF;
    INSERT INTO host_event_sequences AS s (tenant_id, space_id, last)
    VALUES (NEW.tenant_id, NEW.space_id, 1)
    ON CONFLICT (tenant_id, space_id) DO UPDATE SET last = s.last + 1
    RETURNING s.last INTO taken;
    UPDATE host_events SET sequence = taken WHERE id = NEW.id;
    RETURN NULL;
END;
$$;

-- Bound to the schema its tables were just created in: the schema itself, not the search_path that found it
-- ("$user", public can find another schema in another session), and with pg_temp last, so that a session's
-- temporary table of the same name cannot stand in for the sequence table.
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION fencepost_event_sequence_at_commit() SET search_path = %I, pg_temp',
                   current_schema());
END;
$$;

CREATE CONSTRAINT TRIGGER host_events_sequence_at_commit
AFTER INSERT ON host_events
DEFERRABLE INITIALLY DEFERRED
FOR EACH ROW WHEN (NEW.sequence IS NULL)
EXECUTE FUNCTION fencepost_event_sequence_at_commit();

-- One row per event to publish, written only in the transaction whose event insert happened (T3). The
-- lifecycle columns are the relay's (issue 15): the outbox lease protocol, reused.
CREATE TABLE host_event_outbox (
    event_id     TEXT PRIMARY KEY REFERENCES host_events (id),
    destination  TEXT NOT NULL CHECK (length(destination) BETWEEN 1 AND 200),
    headers      TEXT NOT NULL CHECK (fencepost_is_json_object(headers)),
    status       TEXT NOT NULL CHECK (status IN ('pending', 'processing', 'published', 'retry_pending', 'dead_lettered')),
    attempts     INTEGER NOT NULL CHECK (attempts >= 0),
    lease_owner  TEXT,
    lease_token  TEXT,
    lease_until  TIMESTAMPTZ,
    available_at TIMESTAMPTZ NOT NULL,
    published_at TIMESTAMPTZ,
    last_error   TEXT,
    created_at   TIMESTAMPTZ NOT NULL,
    updated_at   TIMESTAMPTZ NOT NULL
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
    payload               TEXT NOT NULL CHECK (fencepost_is_json_object(payload)),
    created_at            TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (id, log),
    -- The composite reference keeps an entry in its parent's scope (host-spec V1).
    FOREIGN KEY (tenant_id, space_id, invocation_id) REFERENCES invocations (tenant_id, space_id, id)
);

CREATE INDEX host_reconciliations_by_invocation ON host_reconciliations (invocation_id, created_at);

-- An operator and an auditor read the log as it was written: no statement may rewrite or remove an entry.
CREATE FUNCTION fencepost_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is append-only', TG_TABLE_NAME USING ERRCODE = 'check_violation';
END;
$$;

CREATE TRIGGER host_reconciliations_append_only
BEFORE UPDATE OR DELETE ON host_reconciliations
FOR EACH ROW EXECUTE FUNCTION fencepost_append_only();

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
    evidence             TEXT CHECK (evidence IS NULL OR (fencepost_is_json_object(evidence))),
    prior_status         TEXT NOT NULL CHECK (prior_status IN ('reconciliation_required')),
    prior_error          TEXT,
    prior_reconciliation TEXT CHECK (prior_reconciliation IS NULL OR (fencepost_is_json_object(prior_reconciliation))),
    request_digest       TEXT NOT NULL CHECK (length(request_digest) BETWEEN 5 AND 100),
    created_at           TIMESTAMPTZ NOT NULL,
    UNIQUE (id),
    -- The composite reference keeps a resolution in its invocation's scope (host-spec V1).
    FOREIGN KEY (tenant_id, space_id, invocation_id) REFERENCES invocations (tenant_id, space_id, id)
);

-- A resolution is history: no statement may rewrite or remove it (fencepost_append_only, migration 0005).
CREATE TRIGGER host_resolutions_append_only
BEFORE UPDATE OR DELETE ON host_resolutions
FOR EACH ROW EXECUTE FUNCTION fencepost_append_only();

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
    payload       TEXT NOT NULL CHECK (fencepost_is_json_object(payload)),
    fingerprint   TEXT CHECK (fingerprint IS NULL OR length(fingerprint) BETWEEN 5 AND 100),
    created_at    TIMESTAMPTZ NOT NULL,
    -- The composite reference keeps a record in its parent's scope (host-spec V1).
    FOREIGN KEY (tenant_id, space_id, invocation_id) REFERENCES invocations (tenant_id, space_id, id)
);

CREATE INDEX host_governance_records_by_invocation ON host_governance_records (invocation_id, created_at);

-- Policy and HITL evidence is read as it was written: no statement may rewrite or remove a record.
CREATE TRIGGER host_governance_records_append_only
BEFORE UPDATE OR DELETE ON host_governance_records
FOR EACH ROW EXECUTE FUNCTION fencepost_append_only();

-- Delivery targets and delivery starts (migration 0009, ADRs 0055, 0056): a target by unique live name, URL
-- and labels; the start barrier row of each delivery invocation.
CREATE TABLE delivery_targets (
    id         TEXT PRIMARY KEY CHECK (length(id) BETWEEN 1 AND 100),
    name       TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 100),
    url        TEXT NOT NULL CHECK (length(url) BETWEEN 1 AND 2000),
    labels     TEXT NOT NULL CHECK (fencepost_is_json_object(labels)),
    added_at   TIMESTAMPTZ NOT NULL,
    removed_at TIMESTAMPTZ
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
    started_at      TIMESTAMPTZ NOT NULL
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
    updated_at            TIMESTAMPTZ NOT NULL,
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
