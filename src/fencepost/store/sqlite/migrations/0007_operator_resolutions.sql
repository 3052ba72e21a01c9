-- fencepost control schema, version 7: operator resolutions of reconciliation_required invocations (host-spec
-- §1.Y-13; ADR 0048). One append-only row per resolved invocation records the operator's verdict, note and
-- evidence beside a copy of the verdict it settles; the invocation's own error, reconciliation, adapter rows,
-- reconciliation log entries and events are never rewritten by a resolution.

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
