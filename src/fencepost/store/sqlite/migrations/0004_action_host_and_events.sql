-- fencepost: foreign-keys-off
-- fencepost control schema, version 4: the action host (issue 12; host-spec sections A, B, C, E, I, T;
-- ADRs 0022-0027). An invocation of an action, one adapter row per adapter step, and the host's event log
-- with its publication outbox.
--
-- The lease of a dispatched or inline invocation is the outbox command whose id is the invocation id
-- (ADR 0022): attempt_count is that command's delivery_count, never a column here (host-spec H16).

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
    UNIQUE (tenant_id, space_id, action_id, idempotency_key),
    UNIQUE (tenant_id, space_id, id),
    CHECK (updated_at >= created_at)
);

CREATE INDEX invocations_by_status ON invocations (status, created_at);

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

-- The inline caller's lease (ADR 0022): a host invocation's command may be PROCESSING, DELIVERED or FAILED at
-- delivery 0, held by the caller that runs it now; every other kind still needs a claim first. SQLite cannot
-- alter a CHECK in place: the table is rebuilt (ADR 0017).
CREATE TABLE new_commands (
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
INSERT INTO new_commands (id, kind, payload, status, available_at, created_at, updated_at, lease_owner, lease_token, lease_until, last_heartbeat_at, delivery_count, finished_at, last_error)
SELECT id, kind, payload, status, available_at, created_at, updated_at, lease_owner, lease_token, lease_until, last_heartbeat_at, delivery_count, finished_at, last_error FROM commands;
DROP TABLE commands;
ALTER TABLE new_commands RENAME TO commands;
CREATE INDEX commands_pending_due ON commands (kind, available_at) WHERE status = 'PENDING';
CREATE INDEX commands_processing_lease ON commands (kind, lease_until) WHERE status = 'PROCESSING';
