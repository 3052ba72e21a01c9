-- fencepost control schema, version 2 (PostgreSQL): package publications with a compare-and-set head,
-- installations with lifecycle disposition and quarantine, and atomic workflow admission (ADR-0224):
-- Runs, StepRuns, events, StepRun mutations, the admission ledger (admissions + admission steps) and
-- receipts. JSON columns are mirrored by plain columns that CHECKs keep equal to the JSON content.

-- A field of a JSON text, or NULL when the text does not parse (the CHECK on the text itself reports that).
CREATE FUNCTION fencepost_json_field(doc text, path text[]) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
BEGIN
    RETURN doc::json #>> path;
EXCEPTION WHEN data_exception THEN
    RETURN NULL;
END;
$$;

CREATE FUNCTION fencepost_json_array_length(doc text, path text[]) RETURNS integer
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
BEGIN
    RETURN json_array_length(doc::json #> path);
EXCEPTION WHEN data_exception OR invalid_parameter_value THEN
    RETURN NULL;
END;
$$;

CREATE TABLE package_publications (
    id                      TEXT PRIMARY KEY,
    package_name            TEXT NOT NULL CHECK (length(package_name) BETWEEN 1 AND 100),
    version                 TEXT NOT NULL CHECK (length(version) BETWEEN 1 AND 64),
    content_digest          TEXT NOT NULL CHECK (content_digest ~ '^sha256:[0-9a-f]{64}$'),
    definition              TEXT NOT NULL CHECK (fencepost_is_json(definition) AND length(definition) <= 262144),
    definition_digest       TEXT NOT NULL CHECK (definition_digest ~ '^sha256:[0-9a-f]{64}$'),
    status                  TEXT NOT NULL CHECK (status IN ('active', 'withdrawn')),
    gate                    TEXT NOT NULL CHECK (gate IN ('passed', 'waived')),
    gate_run_id             TEXT REFERENCES rehearsal_runs (id),
    previous_publication_id TEXT REFERENCES package_publications (id),
    published_at            TIMESTAMPTZ NOT NULL,
    withdrawn_at            TIMESTAMPTZ,
    UNIQUE (package_name, version),
    CHECK (fencepost_json_field(definition, '{package}') IS NOT DISTINCT FROM package_name),
    CHECK (fencepost_json_field(definition, '{version}') IS NOT DISTINCT FROM version),
    CHECK (fencepost_json_field(definition, '{content_digest}') IS NOT DISTINCT FROM content_digest),
    CHECK ((status = 'withdrawn') = (withdrawn_at IS NOT NULL)),
    CHECK ((gate = 'passed') = (gate_run_id IS NOT NULL))
);

-- Publishing looks up the rehearsals of the exact content being published.
CREATE INDEX rehearsal_runs_by_digest ON rehearsal_runs (content_digest);

-- The per-package head, moved only by compare-and-set on revision.
CREATE TABLE package_heads (
    package_name   TEXT PRIMARY KEY,
    publication_id TEXT NOT NULL REFERENCES package_publications (id),
    revision       INTEGER NOT NULL CHECK (revision >= 1),
    updated_at     TIMESTAMPTZ NOT NULL
);

CREATE TABLE package_installations (
    id             TEXT PRIMARY KEY,
    package_name   TEXT NOT NULL UNIQUE CHECK (length(package_name) BETWEEN 1 AND 100),
    publication_id TEXT NOT NULL REFERENCES package_publications (id),
    lock_digest    TEXT NOT NULL CHECK (lock_digest ~ '^sha256:[0-9a-f]{64}$'),
    status         TEXT NOT NULL CHECK (status IN ('active', 'uninstalled')),
    generation     INTEGER NOT NULL CHECK (generation >= 1),
    installed_at   TIMESTAMPTZ NOT NULL,
    updated_at     TIMESTAMPTZ NOT NULL
);

-- Lifecycle disposition; no row means active.
CREATE TABLE installation_dispositions (
    installation_id TEXT PRIMARY KEY REFERENCES package_installations (id),
    disposition     TEXT NOT NULL CHECK (disposition IN ('active', 'disabled')),
    reason          TEXT,
    updated_at      TIMESTAMPTZ NOT NULL
);

-- Quarantine of an exact installation and lock; enable never clears it, only an explicit release does.
CREATE TABLE installation_quarantines (
    id              TEXT PRIMARY KEY,
    installation_id TEXT NOT NULL REFERENCES package_installations (id),
    lock_digest     TEXT NOT NULL CHECK (lock_digest ~ '^sha256:[0-9a-f]{64}$'),
    reason          TEXT NOT NULL CHECK (length(reason) BETWEEN 1 AND 1000),
    quarantined_at  TIMESTAMPTZ NOT NULL,
    released_at     TIMESTAMPTZ,
    release_reason  TEXT,
    CHECK ((released_at IS NULL) = (release_reason IS NULL))
);
CREATE UNIQUE INDEX installation_quarantines_open
    ON installation_quarantines (installation_id, lock_digest) WHERE released_at IS NULL;

CREATE TABLE workflow_runs (
    id              TEXT PRIMARY KEY,
    plan_id         TEXT NOT NULL UNIQUE,
    installation_id TEXT NOT NULL REFERENCES package_installations (id),
    publication_id  TEXT NOT NULL REFERENCES package_publications (id),
    workflow_id     TEXT NOT NULL,
    status          TEXT NOT NULL CHECK (status IN ('running', 'succeeded', 'failed', 'cancelled')),
    fence           INTEGER NOT NULL CHECK (fence >= 1),
    created_at      TIMESTAMPTZ NOT NULL
);

CREATE TABLE workflow_step_runs (
    id          TEXT PRIMARY KEY,
    run_id      TEXT NOT NULL REFERENCES workflow_runs (id),
    step_key    TEXT NOT NULL CHECK (length(step_key) BETWEEN 1 AND 64),
    task_id     TEXT NOT NULL,
    task_digest TEXT NOT NULL CHECK (task_digest ~ '^sha256:[0-9a-f]{64}$'),
    needs       TEXT NOT NULL CHECK (fencepost_json_array_length(needs, '{}') IS NOT NULL),
    status      TEXT NOT NULL CHECK (status IN ('waiting', 'ready', 'running', 'succeeded', 'failed', 'cancelled')),
    fence       INTEGER NOT NULL CHECK (fence >= 1),
    created_at  TIMESTAMPTZ NOT NULL,
    UNIQUE (run_id, step_key)
);

CREATE TABLE workflow_events (
    id          TEXT PRIMARY KEY,
    run_id      TEXT NOT NULL REFERENCES workflow_runs (id),
    step_run_id TEXT REFERENCES workflow_step_runs (id),
    seq         INTEGER NOT NULL CHECK (seq >= 1),
    type        TEXT NOT NULL CHECK (type IN ('workflow.admitted', 'step.created')),
    payload     TEXT NOT NULL CHECK (fencepost_is_json(payload) AND length(payload) <= 65536),
    created_at  TIMESTAMPTZ NOT NULL,
    UNIQUE (run_id, seq),
    CHECK ((type = 'step.created') = (step_run_id IS NOT NULL)),
    CHECK (fencepost_json_field(payload, '{run_id}') IS NOT DISTINCT FROM run_id)
);

CREATE TABLE workflow_step_mutations (
    id          TEXT PRIMARY KEY,
    step_run_id TEXT NOT NULL REFERENCES workflow_step_runs (id),
    run_id      TEXT NOT NULL REFERENCES workflow_runs (id),
    fence       INTEGER NOT NULL CHECK (fence >= 1),
    kind        TEXT NOT NULL CHECK (kind IN ('create')),
    to_status   TEXT NOT NULL CHECK (to_status IN ('waiting', 'ready')),
    created_at  TIMESTAMPTZ NOT NULL,
    UNIQUE (step_run_id, fence)
);

-- The admission ledger: one row per admitted plan ...
CREATE TABLE workflow_admissions (
    plan_id         TEXT PRIMARY KEY CHECK (length(plan_id) BETWEEN 1 AND 128),
    plan_digest     TEXT NOT NULL CHECK (plan_digest ~ '^sha256:[0-9a-f]{64}$'),
    plan            TEXT NOT NULL CHECK (fencepost_is_json(plan) AND length(plan) <= 262144),
    run_id          TEXT NOT NULL UNIQUE REFERENCES workflow_runs (id),
    package_name    TEXT NOT NULL,
    publication_id  TEXT NOT NULL REFERENCES package_publications (id),
    installation_id TEXT NOT NULL REFERENCES package_installations (id),
    lock_digest     TEXT NOT NULL CHECK (lock_digest ~ '^sha256:[0-9a-f]{64}$'),
    workflow_id     TEXT NOT NULL,
    workflow_digest TEXT NOT NULL CHECK (workflow_digest ~ '^sha256:[0-9a-f]{64}$'),
    step_count      INTEGER NOT NULL CHECK (step_count BETWEEN 1 AND 128),
    final_fence     INTEGER NOT NULL CHECK (final_fence >= 1),
    receipt_id      TEXT NOT NULL UNIQUE,
    admitted_at     TIMESTAMPTZ NOT NULL,
    CHECK (fencepost_json_field(plan, '{plan_id}') IS NOT DISTINCT FROM plan_id),
    CHECK (fencepost_json_field(plan, '{digest}') IS NOT DISTINCT FROM plan_digest),
    CHECK (fencepost_json_field(plan, '{package}') IS NOT DISTINCT FROM package_name),
    CHECK (fencepost_json_field(plan, '{publication_id}') IS NOT DISTINCT FROM publication_id),
    CHECK (fencepost_json_field(plan, '{installation_id}') IS NOT DISTINCT FROM installation_id),
    CHECK (fencepost_json_field(plan, '{lock}') IS NOT DISTINCT FROM lock_digest),
    CHECK (fencepost_json_field(plan, '{workflow_id}') IS NOT DISTINCT FROM workflow_id),
    CHECK (fencepost_json_field(plan, '{workflow_digest}') IS NOT DISTINCT FROM workflow_digest),
    CHECK (fencepost_json_array_length(plan, '{steps}') IS NOT DISTINCT FROM step_count)
);

-- ... and one row per step, binding task definition, needs, StepRun, mutation and event identity.
CREATE TABLE workflow_admission_steps (
    plan_id     TEXT NOT NULL REFERENCES workflow_admissions (plan_id),
    step_key    TEXT NOT NULL,
    task_id     TEXT NOT NULL,
    task_digest TEXT NOT NULL CHECK (task_digest ~ '^sha256:[0-9a-f]{64}$'),
    needs       TEXT NOT NULL CHECK (fencepost_json_array_length(needs, '{}') IS NOT NULL),
    step_run_id TEXT NOT NULL UNIQUE REFERENCES workflow_step_runs (id),
    mutation_id TEXT NOT NULL UNIQUE REFERENCES workflow_step_mutations (id),
    event_id    TEXT NOT NULL UNIQUE REFERENCES workflow_events (id),
    PRIMARY KEY (plan_id, step_key)
);

CREATE TABLE workflow_admission_receipts (
    id             TEXT PRIMARY KEY,
    plan_id        TEXT NOT NULL UNIQUE REFERENCES workflow_admissions (plan_id),
    run_id         TEXT NOT NULL UNIQUE REFERENCES workflow_runs (id),
    receipt        TEXT NOT NULL CHECK (fencepost_is_json(receipt) AND length(receipt) <= 262144),
    receipt_digest TEXT NOT NULL CHECK (receipt_digest ~ '^sha256:[0-9a-f]{64}$'),
    CHECK (fencepost_json_field(receipt, '{receipt_id}') IS NOT DISTINCT FROM id),
    CHECK (fencepost_json_field(receipt, '{plan_id}') IS NOT DISTINCT FROM plan_id),
    CHECK (fencepost_json_field(receipt, '{run_id}') IS NOT DISTINCT FROM run_id)
);
