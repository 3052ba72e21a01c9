-- SQLite queries of the control store. Every name here also exists in ../postgres/queries.sql
-- (tests/store/test_queries.py checks it). Instants arrive as parameters from the store's clock.

-- ───────────────────────────── outbox ─────────────────────────────

-- name: insert_command
-- A new PENDING command; the caller inserts its parent rows in the same transaction.
INSERT INTO commands (id, kind, payload, status, available_at, created_at, updated_at, delivery_count)
VALUES (:id, :kind, :payload, 'PENDING', :available_at, :now, :now, 0);

-- name: notify_command
-- Wakes idle workers of :kind on PostgreSQL (LISTEN/NOTIFY, ADR 0014). SQLite has no notifications between
-- processes: its workers poll, so this is a no-op statement here.
SELECT 1;

-- name: claim_commands
-- One atomic conditional update for one kind: due PENDING rows and PROCESSING rows whose lease
-- expired, expired leases first (they waited longest). Each claimed row gets its own fresh random
-- token. One kind per statement keeps both scans pure index range scans (no sort of all due rows).
UPDATE commands
SET status = 'PROCESSING',
    lease_owner = :owner,
    lease_token = lower(hex(randomblob(16))),
    lease_until = :lease_until,
    last_heartbeat_at = :now,
    updated_at = :now,
    delivery_count = delivery_count + 1
WHERE id IN (
    SELECT id FROM (
        SELECT id FROM commands
        WHERE status = 'PROCESSING' AND kind = :kind AND lease_until <= :now
        ORDER BY lease_until LIMIT :limit)
    UNION ALL
    SELECT id FROM (
        SELECT id FROM commands
        WHERE status = 'PENDING' AND kind = :kind AND available_at <= :now
        ORDER BY available_at LIMIT :limit)
    LIMIT :limit)
RETURNING id, kind, payload, lease_owner, lease_token, lease_until, delivery_count;

-- name: renew_lease
-- Heartbeat and fence: touches exactly one row only while the caller's token is current.
UPDATE commands
SET lease_until = :lease_until, last_heartbeat_at = :now, updated_at = :now
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
-- statement. :leases is a JSON array of {"id", "token"}; each row is found by its primary key and changes
-- only under its own token, exactly as finish_command would change it. Returns the ids delivered.
UPDATE commands
SET status = 'DELIVERED', lease_owner = NULL, lease_token = NULL, lease_until = NULL,
    finished_at = :now, updated_at = :now, last_error = NULL
FROM (SELECT json_extract(l.value, '$.id') AS id, json_extract(l.value, '$.token') AS token
      FROM json_each(:leases) AS l) AS wanted
WHERE commands.id = wanted.id AND commands.lease_token = wanted.token AND commands.status = 'PROCESSING'
RETURNING commands.id;

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
-- Several heartbeat-history rows sharing the instant :at, in list order. :events is a JSON array of
-- {"command_id", "event", "owner", "delivery", "lease_until"} (lease_until as fixed-width UTC text or null).
INSERT INTO lease_events (command_id, event, owner, delivery, at, lease_until)
SELECT json_extract(e.value, '$.command_id'), json_extract(e.value, '$.event'), json_extract(e.value, '$.owner'),
       json_extract(e.value, '$.delivery'), :at, json_extract(e.value, '$.lease_until')
FROM json_each(:events) AS e
ORDER BY e.key;

-- name: lease_events
SELECT seq, command_id, event, owner, delivery, at, lease_until
FROM lease_events WHERE command_id = :command_id ORDER BY seq;

-- name: count_commands_by_status
SELECT status, count(*) AS n FROM commands GROUP BY status;

-- name: store_now
-- The store's clock; on SQLite the caller supplies it.
SELECT :now AS now;

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
SELECT coalesce(max(seq), 0) + 1 AS seq FROM rehearsal_attempts WHERE run_id = :run_id;

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
-- First lock of the Attempt-then-Outbox order (a plain read under SQLite's write reservation).
SELECT id, status, command_id FROM rehearsal_attempts WHERE id = :id;

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
