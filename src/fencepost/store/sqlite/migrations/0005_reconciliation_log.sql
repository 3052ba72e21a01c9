-- fencepost control schema, version 5: the reconciliation logs of the action host (host-spec K1, L13, V;
-- ADR 0032). One append-only table holds both logs: a governance entry (ExternalReconciliation evidence) and
-- the outer completion entry of one fact share a stable id, so each log keeps the first write of that id.

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
