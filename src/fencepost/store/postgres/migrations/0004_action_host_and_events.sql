-- fencepost control schema, version 4 (PostgreSQL): the action host (issue 12; host-spec sections A, B, C, E, I, T;
-- ADRs 0022-0027). An invocation of an action, one adapter row per adapter step, and the host's event log
-- with its publication outbox.
--
-- The lease of a dispatched or inline invocation is the outbox command whose id is the invocation id
-- (ADR 0022): attempt_count is that command's delivery_count, never a column here (host-spec H16).

-- A JSON text that is an object, or false (also when it does not parse).
CREATE FUNCTION fencepost_is_json_object(doc text) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
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
    occurred_at  TIMESTAMPTZ NOT NULL,
    recorded_at  TIMESTAMPTZ NOT NULL,
    payload      TEXT NOT NULL CHECK (fencepost_is_json_object(payload)),
    actor        TEXT CHECK (actor IS NULL OR (fencepost_is_json_object(actor))),
    UNIQUE (tenant_id, space_id, sequence)
);

CREATE INDEX host_events_by_subject ON host_events (subject_type, subject_id, sequence);

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

-- The inline caller's lease (ADR 0022): a host invocation's command may be PROCESSING, DELIVERED or FAILED at
-- delivery 0, held by the caller that runs it now; every other kind still needs a claim first.
ALTER TABLE commands DROP CONSTRAINT commands_delivered_once,
    ADD CONSTRAINT commands_delivered_once
        CHECK (status = 'PENDING' OR delivery_count >= 1 OR status = 'ABORTED' OR kind LIKE 'host.invoke:%');
