-- fencepost control schema, version 11 (PostgreSQL): the state binding of an action (host-spec A13, A17, A19; ADR 0077).
-- An invocation of a state-bound action names, from submission on, the entity it is bound to and the state its
-- success records (three columns, all set or none). The entity's recorded state lives in entity_states, one row
-- per (tenant, space, subject, entity): the state, the state it had before the invocation that last changed it
-- first changed it, and that invocation (in the row's scope).
--
-- Self-contained: three nullable columns (every existing row is unbound), their CHECKs, and a new table.

ALTER TABLE invocations
    ADD COLUMN state_subject TEXT CHECK (state_subject IS NULL OR length(state_subject) BETWEEN 1 AND 100),
    ADD COLUMN state_entity_id TEXT CHECK (state_entity_id IS NULL OR length(state_entity_id) BETWEEN 1 AND 200),
    ADD COLUMN state_target TEXT CHECK (state_target IS NULL OR length(state_target) BETWEEN 1 AND 100),
    ADD CONSTRAINT invocations_state_binding_whole
        CHECK ((state_subject IS NULL) = (state_entity_id IS NULL) AND (state_subject IS NULL) = (state_target IS NULL));

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
