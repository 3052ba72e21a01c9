-- fencepost control schema, version 8 (PostgreSQL): the action host's governance evidence (host-spec D5, D6,
-- O, P; §1.Y-5, §1.Y-6; ADRs 0043-0045). One append-only table: policy records, the persisted mutation
-- footprint, approval requests and decisions (the HITL checkpoint), obligations, their satisfactions and
-- execution attestations. Every id is derived from the invocation and what the record is about, never the
-- attempt number, so a retried or recovered attempt re-appends under the same id and the first write wins.
--
-- Self-contained: a new table, its index and its append-only trigger (fencepost_append_only is version 5's).

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
