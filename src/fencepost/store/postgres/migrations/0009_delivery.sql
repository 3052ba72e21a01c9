-- fencepost control schema, version 9 (PostgreSQL): delivery targets and delivery starts (issue 17; ADRs 0055, 0056).
-- A target is a database a published package is delivered to, by name (unique among the targets not removed),
-- with its URL and labels; removing it keeps the row (removed_at) so past deliveries still name it. A delivery
-- start is the start barrier of one delivery invocation: the row is written in the control-store transaction
-- that re-checked the publication head, installation, disposition and quarantine guards, and once it exists a
-- recovered run goes on past the barrier.
--
-- Self-contained: two new tables and their indexes; no existing table changes.

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
