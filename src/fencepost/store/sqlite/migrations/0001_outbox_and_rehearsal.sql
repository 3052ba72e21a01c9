-- fencepost control schema, version 1: the generic command outbox with fenced leases and its
-- heartbeat history, and plugin delivery rehearsal Runs, Attempts and Receipts.
-- Instants are fixed-width UTC text (2026-01-01T00:00:00.000000Z) so they sort in time order.

CREATE TABLE commands (
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
    CHECK (status = 'PENDING' OR delivery_count >= 1 OR status = 'ABORTED')
);

-- Claim scans are index-driven: due PENDING rows by available_at, expired PROCESSING rows by lease_until.
CREATE INDEX commands_pending_due ON commands (kind, available_at) WHERE status = 'PENDING';
CREATE INDEX commands_processing_lease ON commands (kind, lease_until) WHERE status = 'PROCESSING';

CREATE TABLE lease_events (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    command_id  TEXT NOT NULL REFERENCES commands (id),
    event       TEXT NOT NULL CHECK (event IN ('claim', 'takeover', 'heartbeat', 'release', 'reconcile',
                                               'abort', 'deliver', 'fail')),
    owner       TEXT,
    delivery    INTEGER NOT NULL CHECK (delivery >= 0),
    at          TEXT NOT NULL,
    lease_until TEXT
);
CREATE INDEX lease_events_by_command ON lease_events (command_id, seq);

CREATE TABLE rehearsal_runs (
    id               TEXT PRIMARY KEY,
    package_name     TEXT NOT NULL CHECK (length(package_name) BETWEEN 1 AND 100),
    package_version  TEXT NOT NULL CHECK (length(package_version) BETWEEN 1 AND 64),
    previous_version TEXT,
    content_digest   TEXT NOT NULL CHECK ((length(content_digest) = 71 AND substr(content_digest, 1, 7) = 'sha256:' AND NOT substr(content_digest, 8) GLOB '*[^0-9a-f]*')),
    manifest         TEXT NOT NULL CHECK (json_valid(manifest)),
    status           TEXT NOT NULL CHECK (status IN ('READY', 'RETIRED')),
    created_at       TEXT NOT NULL
);

-- The frozen package: every file's bytes, so later edits on disk never change what Attempts execute.
CREATE TABLE rehearsal_run_files (
    run_id  TEXT NOT NULL REFERENCES rehearsal_runs (id),
    path    TEXT NOT NULL CHECK (length(path) BETWEEN 1 AND 300),
    sha256  TEXT NOT NULL CHECK (length(sha256) = 71 AND substr(sha256, 1, 7) = 'sha256:'
                                 AND NOT substr(sha256, 8) GLOB '*[^0-9a-f]*'),
    size    INTEGER NOT NULL CHECK (size >= 0),
    content BLOB NOT NULL CHECK (length(content) = size),
    PRIMARY KEY (run_id, path)
);

CREATE TABLE rehearsal_attempts (
    id          TEXT PRIMARY KEY,
    run_id      TEXT NOT NULL REFERENCES rehearsal_runs (id),
    seq         INTEGER NOT NULL CHECK (seq >= 1),
    command_id  TEXT NOT NULL UNIQUE REFERENCES commands (id),
    status      TEXT NOT NULL CHECK (status IN ('PENDING', 'RUNNING', 'SUCCEEDED', 'FAILED', 'ABORTED')),
    delivery    INTEGER NOT NULL DEFAULT 0 CHECK (delivery >= 0),
    created_at  TEXT NOT NULL,
    started_at  TEXT,
    finished_at TEXT,
    error       TEXT,
    UNIQUE (run_id, seq),
    CHECK ((status IN ('SUCCEEDED', 'FAILED', 'ABORTED')) = (finished_at IS NOT NULL))
);

CREATE TABLE rehearsal_receipts (
    id                   TEXT PRIMARY KEY,
    attempt_id           TEXT NOT NULL REFERENCES rehearsal_attempts (id),
    position             INTEGER NOT NULL CHECK (position BETWEEN 1 AND 6),
    scenario             TEXT NOT NULL CHECK (length(scenario) BETWEEN 1 AND 64),
    status               TEXT NOT NULL CHECK (status IN ('PENDING', 'RUNNING', 'SUCCEEDED', 'FAILED', 'ABORTED')),
    delivery             INTEGER,
    evidence             TEXT CHECK (evidence IS NULL OR json_valid(evidence)),
    evidence_fingerprint TEXT CHECK (evidence_fingerprint IS NULL
                                     OR (length(evidence_fingerprint) = 71
                                         AND substr(evidence_fingerprint, 1, 7) = 'sha256:'
                                         AND NOT substr(evidence_fingerprint, 8) GLOB '*[^0-9a-f]*')),
    started_at           TEXT,
    finished_at          TEXT,
    UNIQUE (attempt_id, position),
    UNIQUE (attempt_id, scenario),
    CHECK ((evidence IS NULL) = (evidence_fingerprint IS NULL)),
    CHECK (status NOT IN ('SUCCEEDED', 'FAILED') OR evidence IS NOT NULL)
);
