-- fencepost control schema, version 1 (PostgreSQL): the generic command outbox with fenced leases and its
-- heartbeat history, and plugin delivery rehearsal Runs, Attempts and Receipts. Runs as one script in one
-- transaction, under the migration advisory lock (see store.py).

-- Payload, manifest and evidence are TEXT holding canonical JSON (the exact text the SQLite store keeps,
-- so evidence fingerprints verify byte for byte on both backends). This function is the CHECK that the
-- text parses: a plain ``value::json`` cast in a CHECK would raise a data exception (22P02) instead of a
-- check violation, and PostgreSQL 15 has no ``IS JSON`` predicate. ``json`` (not ``jsonb``) mirrors SQLite's
-- json_valid: syntax only, so a ``\u0000`` escape is accepted.
CREATE FUNCTION fencepost_is_json(value text) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
BEGIN
    PERFORM value::json;
    RETURN true;
EXCEPTION WHEN data_exception THEN
    RETURN false;
END;
$$;

CREATE TABLE commands (
    id                TEXT PRIMARY KEY,
    kind              TEXT NOT NULL CHECK (length(kind) BETWEEN 1 AND 100),
    payload           TEXT NOT NULL CHECK (fencepost_is_json(payload)),
    status            TEXT NOT NULL CHECK (status IN ('PENDING', 'PROCESSING', 'DELIVERED', 'FAILED', 'ABORTED')),
    available_at      TIMESTAMPTZ NOT NULL,
    created_at        TIMESTAMPTZ NOT NULL,
    updated_at        TIMESTAMPTZ NOT NULL,
    lease_owner       TEXT,
    lease_token       TEXT,
    lease_until       TIMESTAMPTZ,
    last_heartbeat_at TIMESTAMPTZ,
    delivery_count    INTEGER NOT NULL DEFAULT 0 CHECK (delivery_count >= 0),
    finished_at       TIMESTAMPTZ,
    last_error        TEXT,
    -- A fenced claim exists exactly while PROCESSING; the token never outlives it.
    CONSTRAINT commands_token_iff_processing CHECK ((status = 'PROCESSING') = (lease_token IS NOT NULL)),
    CONSTRAINT commands_lease_iff_processing
        CHECK ((status = 'PROCESSING') = (lease_owner IS NOT NULL AND lease_until IS NOT NULL)),
    CONSTRAINT commands_finished_iff_terminal
        CHECK ((status IN ('DELIVERED', 'FAILED', 'ABORTED')) = (finished_at IS NOT NULL)),
    CONSTRAINT commands_delivered_once CHECK (status = 'PENDING' OR delivery_count >= 1 OR status = 'ABORTED')
);

-- Claim scans are index-driven: due PENDING rows by available_at, expired PROCESSING rows by lease_until.
CREATE INDEX commands_pending_due ON commands (kind, available_at) WHERE status = 'PENDING';
CREATE INDEX commands_processing_lease ON commands (kind, lease_until) WHERE status = 'PROCESSING';

CREATE TABLE lease_events (
    seq         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    command_id  TEXT NOT NULL REFERENCES commands (id),
    event       TEXT NOT NULL CHECK (event IN ('claim', 'takeover', 'heartbeat', 'release', 'reconcile',
                                               'abort', 'deliver', 'fail')),
    owner       TEXT,
    delivery    INTEGER NOT NULL CHECK (delivery >= 0),
    at          TIMESTAMPTZ NOT NULL,
    lease_until TIMESTAMPTZ
);
CREATE INDEX lease_events_by_command ON lease_events (command_id, seq);

CREATE TABLE rehearsal_runs (
    id               TEXT PRIMARY KEY,
    package_name     TEXT NOT NULL CHECK (length(package_name) BETWEEN 1 AND 100),
    package_version  TEXT NOT NULL CHECK (length(package_version) BETWEEN 1 AND 64),
    previous_version TEXT,
    content_digest   TEXT NOT NULL CHECK (content_digest ~ '^sha256:[0-9a-f]{64}$'),
    manifest         TEXT NOT NULL CHECK (fencepost_is_json(manifest)),
    status           TEXT NOT NULL CHECK (status IN ('READY', 'RETIRED')),
    created_at       TIMESTAMPTZ NOT NULL
);

-- The frozen package: every file's bytes, so later edits on disk never change what Attempts execute.
CREATE TABLE rehearsal_run_files (
    run_id  TEXT NOT NULL REFERENCES rehearsal_runs (id),
    path    TEXT NOT NULL CHECK (length(path) BETWEEN 1 AND 300),
    sha256  TEXT NOT NULL CHECK (sha256 ~ '^sha256:[0-9a-f]{64}$'),
    size    BIGINT NOT NULL CHECK (size >= 0),
    content BYTEA NOT NULL CHECK (octet_length(content) = size),
    PRIMARY KEY (run_id, path)
);

CREATE TABLE rehearsal_attempts (
    id          TEXT PRIMARY KEY,
    run_id      TEXT NOT NULL REFERENCES rehearsal_runs (id),
    seq         INTEGER NOT NULL CHECK (seq >= 1),
    command_id  TEXT NOT NULL UNIQUE REFERENCES commands (id),
    status      TEXT NOT NULL CHECK (status IN ('PENDING', 'RUNNING', 'SUCCEEDED', 'FAILED', 'ABORTED')),
    delivery    INTEGER NOT NULL DEFAULT 0 CHECK (delivery >= 0),
    created_at  TIMESTAMPTZ NOT NULL,
    started_at  TIMESTAMPTZ,
    finished_at TIMESTAMPTZ,
    error       TEXT,
    UNIQUE (run_id, seq),
    CONSTRAINT rehearsal_attempts_finished_iff_terminal
        CHECK ((status IN ('SUCCEEDED', 'FAILED', 'ABORTED')) = (finished_at IS NOT NULL))
);

CREATE TABLE rehearsal_receipts (
    id                   TEXT PRIMARY KEY,
    attempt_id           TEXT NOT NULL REFERENCES rehearsal_attempts (id),
    position             INTEGER NOT NULL CHECK (position BETWEEN 1 AND 6),
    scenario             TEXT NOT NULL CHECK (length(scenario) BETWEEN 1 AND 64),
    status               TEXT NOT NULL CHECK (status IN ('PENDING', 'RUNNING', 'SUCCEEDED', 'FAILED', 'ABORTED')),
    delivery             INTEGER,
    evidence             TEXT CHECK (evidence IS NULL OR fencepost_is_json(evidence)),
    evidence_fingerprint TEXT CHECK (evidence_fingerprint IS NULL
                                     OR evidence_fingerprint ~ '^sha256:[0-9a-f]{64}$'),
    started_at           TIMESTAMPTZ,
    finished_at          TIMESTAMPTZ,
    UNIQUE (attempt_id, position),
    UNIQUE (attempt_id, scenario),
    CONSTRAINT rehearsal_receipts_evidence_with_fingerprint
        CHECK ((evidence IS NULL) = (evidence_fingerprint IS NULL)),
    CONSTRAINT rehearsal_receipts_outcome_has_evidence
        CHECK (status NOT IN ('SUCCEEDED', 'FAILED') OR evidence IS NOT NULL)
);

-- next_attempt_seq: SQLite serializes every write transaction, so "max(seq) + 1, then insert" cannot race
-- there. Under READ COMMITTED two enqueues for one Run would both read the same max and one would fail
-- UNIQUE (run_id, seq). This takes the Run row lock first (parent before child) and then reads max(seq) in
-- a fresh snapshot (a VOLATILE function takes one per statement), so the second enqueue waits for the
-- first and gets the next number. In a read-only transaction it only reads.
CREATE FUNCTION fencepost_next_attempt_seq(p_run_id text) RETURNS integer
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF current_setting('transaction_read_only') = 'off' THEN
        PERFORM 1 FROM rehearsal_runs WHERE id = p_run_id FOR NO KEY UPDATE;
    END IF;
    RETURN (SELECT coalesce(max(seq), 0) + 1 FROM rehearsal_attempts WHERE run_id = p_run_id);
END;
$$;
