-- PostgreSQL queries of the control store. Every name here also exists in ../sqlite/queries.sql
-- (tests/store/test_queries.py checks it). Parameters are written :name and converted to psycopg's
-- %(name)s when loaded.
--
-- The database clock decides lease expiry. :now is never a worker's clock here: it is the instant
-- PostgresTransaction.now() read from the server (SELECT clock_timestamp()) once per transaction, so every
-- row a decision writes and every lease event it records carry the same server instant, exactly as on
-- SQLite. Lease deadlines are computed by the server too (:now + make_interval(secs => :lease_seconds));
-- the :lease_until parameter that the SQLite dialect uses is ignored here.

-- ───────────────────────────── outbox ─────────────────────────────

-- name: insert_command
-- A new PENDING command; the caller inserts its parent rows in the same transaction.
INSERT INTO commands (id, kind, payload, status, available_at, created_at, updated_at, delivery_count)
VALUES (:id, :kind, :payload, 'PENDING', :available_at, :now, :now, 0);

-- name: notify_command
-- Wake idle workers of :kind (ADR 0014): they LISTEN on fencepost_commands. PostgreSQL delivers the
-- notification at COMMIT and drops it on ROLLBACK, and folds identical notifications of one transaction
-- into one. The payload is '<schema>/<kind>', so a worker wakes only for work it can claim in its own
-- schema. A command that is not due yet notifies nobody: polling finds it when it is.
SELECT pg_notify('fencepost_commands', coalesce(current_schema(), '') || '/' || :kind::text)
WHERE :available_at::timestamptz <= :now::timestamptz;

-- name: claim_commands
-- One statement for one kind: lock due rows with FOR UPDATE SKIP LOCKED (so two workers never get the
-- same row and a claimer never waits on a row another transaction holds), then update exactly those. Expired PROCESSING
-- rows first (they waited longest), then due PENDING rows up to the limit; skipped rows do not count
-- against LIMIT. A row changed by a concurrent committed claim is re-checked against the WHERE clause on
-- its newest version before it is locked. Each claimed row gets its own fresh random token. One kind per
-- statement keeps both scans index range scans on the partial indexes (no sort of all due rows). The
-- picked ids reach the UPDATE as one array (= ANY (ARRAY(...))), so it finds them by primary key: joining
-- the CTEs instead let the planner guess 10% of the table for the computed LIMIT and hash-join a
-- sequential scan of every row (claim time grew with the table: 3.6 ms at 10^3 rows, 250 ms at 10^6).
WITH expired AS MATERIALIZED (
    SELECT id FROM commands
    WHERE status = 'PROCESSING' AND kind = :kind AND lease_until <= :now
    ORDER BY lease_until
    LIMIT :limit::integer
    FOR UPDATE SKIP LOCKED
), due AS MATERIALIZED (
    SELECT id FROM commands
    WHERE status = 'PENDING' AND kind = :kind AND available_at <= :now
    ORDER BY available_at
    LIMIT (SELECT :limit::integer - count(*) FROM expired)
    FOR UPDATE SKIP LOCKED
)
UPDATE commands AS c
SET status = 'PROCESSING',
    lease_owner = :owner,
    lease_token = replace(gen_random_uuid()::text, '-', ''),
    lease_until = :now + make_interval(secs => :lease_seconds::double precision),
    last_heartbeat_at = :now,
    updated_at = :now,
    delivery_count = c.delivery_count + 1
WHERE c.id = ANY (ARRAY(SELECT id FROM expired UNION ALL SELECT id FROM due))
RETURNING c.id, c.kind, c.payload, c.lease_owner, c.lease_token, c.lease_until, c.delivery_count;


-- name: renew_lease
-- Heartbeat and fence: touches exactly one row only while the caller's token is current. A concurrent
-- takeover holds the row lock; this statement then waits and re-checks the token on the new version.
UPDATE commands
SET lease_until = :now + make_interval(secs => :lease_seconds::double precision),
    last_heartbeat_at = :now, updated_at = :now
WHERE id = :id AND lease_token = :token AND status = 'PROCESSING'
RETURNING lease_until, delivery_count;


-- name: finish_command
-- Terminal outcome under the lease (DELIVERED or FAILED); clears the token.
UPDATE commands
SET status = :status, lease_owner = NULL, lease_token = NULL, lease_until = NULL,
    finished_at = :now, updated_at = :now, last_error = :error
WHERE id = :id AND lease_token = :token AND status = 'PROCESSING'
RETURNING delivery_count;

-- name: finish_commands
-- Batched completion: every listed command whose token is still current becomes DELIVERED, in one
-- statement (one round trip). :leases is a JSON array of {"id", "token"}; each row is found by its primary
-- key and changes only under its own token, re-checked on the newest row version after any lock wait,
-- exactly as finish_command would change it. Returns the ids delivered.
UPDATE commands AS c
SET status = 'DELIVERED', lease_owner = NULL, lease_token = NULL, lease_until = NULL,
    finished_at = :now, updated_at = :now, last_error = NULL
FROM json_to_recordset(:leases::json) AS wanted (id text, token text)
WHERE c.id = wanted.id AND c.lease_token = wanted.token AND c.status = 'PROCESSING'
RETURNING c.id;

-- name: release_command
-- Graceful stop: give the command back at once instead of waiting for the lease to expire.
UPDATE commands
SET status = 'PENDING', lease_owner = NULL, lease_token = NULL, lease_until = NULL,
    available_at = :now, updated_at = :now
WHERE id = :id AND lease_token = :token AND status = 'PROCESSING'
RETURNING delivery_count, kind;

-- name: reconcile_command
-- Operator reconcile: only an expired PROCESSING lease returns to PENDING.
UPDATE commands
SET status = 'PENDING', lease_owner = NULL, lease_token = NULL, lease_until = NULL,
    available_at = :now, updated_at = :now
WHERE id = :id AND status = 'PROCESSING' AND lease_until <= :now
RETURNING delivery_count, kind;

-- name: abort_command
-- Operator abort: clears the token, which fences the active worker.
UPDATE commands
SET status = 'ABORTED', lease_owner = NULL, lease_token = NULL, lease_until = NULL,
    finished_at = :now, updated_at = :now, last_error = :error
WHERE id = :id AND status IN ('PENDING', 'PROCESSING')
RETURNING delivery_count;

-- name: get_command
-- Public view of one command: never the token.
SELECT id, kind, payload, status, available_at, created_at, updated_at, lease_owner, lease_until,
       last_heartbeat_at, delivery_count, finished_at, last_error
FROM commands WHERE id = :id;

-- name: insert_lease_event
INSERT INTO lease_events (command_id, event, owner, delivery, at, lease_until)
VALUES (:command_id, :event, :owner, :delivery, :at, :lease_until);

-- name: insert_lease_events
-- Several heartbeat-history rows sharing the instant :at, in list order, with one statement (one round
-- trip). :events is a JSON array of {"command_id", "event", "owner", "delivery", "lease_until"}.
INSERT INTO lease_events (command_id, event, owner, delivery, at, lease_until)
SELECT e.value ->> 'command_id', e.value ->> 'event', e.value ->> 'owner', (e.value ->> 'delivery')::integer,
       :at, (e.value ->> 'lease_until')::timestamptz
FROM json_array_elements(:events::json) WITH ORDINALITY AS e (value, n)
ORDER BY e.n;

-- name: lease_events
SELECT seq, command_id, event, owner, delivery, at, lease_until
FROM lease_events WHERE command_id = :command_id ORDER BY seq;

-- name: count_commands_by_status
SELECT status, count(*) AS n FROM commands GROUP BY status;

-- name: store_now
-- The store's clock: the server's, read when called (not the transaction start).
SELECT clock_timestamp() AS now;

-- ──────────────────────────── rehearsal ────────────────────────────

-- name: insert_run
INSERT INTO rehearsal_runs (id, package_name, package_version, previous_version, content_digest, manifest,
                            status, created_at)
VALUES (:id, :package_name, :package_version, :previous_version, :content_digest, :manifest, 'READY', :now);

-- name: insert_run_file
INSERT INTO rehearsal_run_files (run_id, path, sha256, size, content)
VALUES (:run_id, :path, :sha256, :size, :content);

-- name: get_run
SELECT id, package_name, package_version, previous_version, content_digest, manifest, status, created_at
FROM rehearsal_runs WHERE id = :id;

-- name: list_runs
SELECT id, package_name, package_version, previous_version, content_digest, manifest, status, created_at
FROM rehearsal_runs ORDER BY created_at DESC, id LIMIT :limit;

-- name: run_files
SELECT path, sha256, size, content FROM rehearsal_run_files WHERE run_id = :run_id ORDER BY path;

-- name: next_attempt_seq
-- Serializes concurrent enqueues for one Run (Run row lock, then a fresh snapshot), as SQLite's write
-- reservation does; see fencepost_next_attempt_seq in schema.sql.
SELECT fencepost_next_attempt_seq(:run_id) AS seq;


-- name: insert_attempt
INSERT INTO rehearsal_attempts (id, run_id, seq, command_id, status, delivery, created_at)
VALUES (:id, :run_id, :seq, :command_id, 'PENDING', 0, :now);

-- name: insert_receipt
INSERT INTO rehearsal_receipts (id, attempt_id, position, scenario, status)
VALUES (:id, :attempt_id, :position, :scenario, 'PENDING');

-- name: get_attempt
SELECT a.id, a.run_id, a.seq, a.command_id, a.status, a.delivery, a.created_at, a.started_at,
       a.finished_at, a.error,
       c.status AS command_status, c.lease_owner, c.lease_until, c.last_heartbeat_at, c.delivery_count,
       c.available_at
FROM rehearsal_attempts a JOIN commands c ON c.id = a.command_id
WHERE a.id = :id;

-- name: lock_attempt
-- First lock of the Attempt-then-Outbox order: the Attempt row lock, held until the transaction ends.
SELECT id, status, command_id FROM rehearsal_attempts WHERE id = :id FOR UPDATE;


-- name: list_attempts
SELECT a.id, a.run_id, a.seq, a.command_id, a.status, a.delivery, a.created_at, a.started_at,
       a.finished_at, a.error,
       c.status AS command_status, c.lease_owner, c.lease_until, c.last_heartbeat_at, c.delivery_count,
       c.available_at
FROM rehearsal_attempts a JOIN commands c ON c.id = a.command_id
WHERE a.run_id = :run_id ORDER BY a.seq;

-- name: attempt_receipts
SELECT id, attempt_id, position, scenario, status, delivery, evidence, evidence_fingerprint,
       started_at, finished_at
FROM rehearsal_receipts WHERE attempt_id = :attempt_id ORDER BY position;

-- name: start_attempt
-- First fenced write of a delivery: (re)start a non-terminal Attempt under this delivery number.
UPDATE rehearsal_attempts
SET status = 'RUNNING', delivery = :delivery, started_at = :now, error = NULL
WHERE id = :id AND status IN ('PENDING', 'RUNNING')
RETURNING run_id;

-- name: reset_receipts
-- Takeover replays from scratch: provisional evidence of a non-terminal Attempt is discarded.
UPDATE rehearsal_receipts
SET status = 'PENDING', delivery = NULL, evidence = NULL, evidence_fingerprint = NULL,
    started_at = NULL, finished_at = NULL
WHERE attempt_id = :attempt_id
  AND EXISTS (SELECT 1 FROM rehearsal_attempts a WHERE a.id = :attempt_id AND a.status IN ('PENDING', 'RUNNING'));

-- name: receipt_running
UPDATE rehearsal_receipts
SET status = 'RUNNING', delivery = :delivery, started_at = :now
WHERE attempt_id = :attempt_id AND position = :position AND status = 'PENDING';

-- name: receipt_finish
UPDATE rehearsal_receipts
SET status = :status, evidence = :evidence, evidence_fingerprint = :evidence_fingerprint, finished_at = :now
WHERE attempt_id = :attempt_id AND position = :position AND status = 'RUNNING' AND delivery = :delivery;

-- name: abort_open_receipts
UPDATE rehearsal_receipts
SET status = 'ABORTED', finished_at = :now
WHERE attempt_id = :attempt_id AND status IN ('PENDING', 'RUNNING');

-- name: finish_attempt
-- Terminal outcome of a non-terminal Attempt; the caller fences it with the command's token.
UPDATE rehearsal_attempts
SET status = :status, finished_at = :now, error = :error
WHERE id = :id AND status IN ('PENDING', 'RUNNING');

-- name: abort_attempt
UPDATE rehearsal_attempts
SET status = 'ABORTED', finished_at = :now, error = :error
WHERE id = :id AND status IN ('PENDING', 'RUNNING')
RETURNING command_id;

-- name: retire_run
UPDATE rehearsal_runs SET status = 'RETIRED' WHERE id = :id AND status = 'READY';
