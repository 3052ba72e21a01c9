-- fencepost control schema, version 17 (PostgreSQL): the store's identity (ADR 0108).
--
-- One random id per control database, made by this migration and never changed. The action host derives every
-- new invocation's id from it as well as from the tenant, space, action and idempotency key, so the idempotency
-- key a provider receives (the adapter_invocation_id, derived from the invocation id) differs between two
-- deployments, or a database made anew, that use the same keys with one provider account. A backup restored
-- keeps it, so recovery after a restore sends the keys it sent before.

CREATE TABLE store_identity (
    singleton  INTEGER PRIMARY KEY CHECK (singleton = 1),
    id         TEXT NOT NULL CHECK (length(id) = 32)
);

INSERT INTO store_identity (singleton, id)
VALUES (1, replace(gen_random_uuid()::text, '-', ''));
