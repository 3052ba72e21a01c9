-- fencepost control schema, version 7 (PostgreSQL): operator resolutions of reconciliation_required
-- invocations (host-spec §1.Y-13; ADR 0048). One append-only row per resolved invocation records the
-- operator's verdict, note and evidence beside a copy of the verdict it settles; the invocation's own error,
-- reconciliation, adapter rows, reconciliation log entries and events are never rewritten by a resolution.

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
