-- Rehearsal Runs, Attempts and Receipts. Lock order is Attempt then Outbox on every path. Receipt and Attempt
-- writes of a delivery run only inside a fenced unit of work and carry the lease condition {{lease_held}}
-- (fencepost.store.fence), so a stale worker's write touches nothing even before the fence.

-- name: insert_run
INSERT INTO rehearsal_runs (id, package_name, package_version, previous_version, content_digest, manifest,
                            status, created_at)
VALUES (:id, :package_name, :package_version, :previous_version, :content_digest, :manifest, 'READY', :now);

-- name: insert_run_file
INSERT INTO rehearsal_run_files (run_id, path, sha256, size, content)
VALUES (:run_id, :path, :sha256, :size, :content);

-- name: get_run
-- instants: created_at
SELECT id, package_name, package_version, previous_version, content_digest, manifest, status, created_at
FROM rehearsal_runs WHERE id = :id;

-- name: list_runs
-- instants: created_at
SELECT id, package_name, package_version, previous_version, content_digest, manifest, status, created_at
FROM rehearsal_runs ORDER BY created_at DESC, id LIMIT :limit;

-- name: run_files
SELECT path, sha256, size, content FROM rehearsal_run_files WHERE run_id = :run_id ORDER BY path;

-- name: next_attempt_seq
-- per-dialect

-- name: insert_attempt
INSERT INTO rehearsal_attempts (id, run_id, seq, command_id, status, delivery, created_at)
VALUES (:id, :run_id, :seq, :command_id, 'PENDING', 0, :now);

-- name: insert_receipt
INSERT INTO rehearsal_receipts (id, attempt_id, position, scenario, status)
VALUES (:id, :attempt_id, :position, :scenario, 'PENDING');

-- name: get_attempt
-- instants: created_at, started_at, finished_at, lease_until, last_heartbeat_at, available_at
SELECT a.id, a.run_id, a.seq, a.command_id, a.status, a.delivery, a.created_at, a.started_at,
       a.finished_at, a.error,
       c.status AS command_status, c.lease_owner, c.lease_until, c.last_heartbeat_at, c.delivery_count,
       c.available_at
FROM rehearsal_attempts a JOIN commands c ON c.id = a.command_id
WHERE a.id = :id;

-- name: lock_attempt
-- per-dialect
-- First lock of the Attempt-then-Outbox order (a plain read under SQLite's write reservation).

-- name: list_attempts
-- instants: created_at, started_at, finished_at, lease_until, last_heartbeat_at, available_at
SELECT a.id, a.run_id, a.seq, a.command_id, a.status, a.delivery, a.created_at, a.started_at,
       a.finished_at, a.error,
       c.status AS command_status, c.lease_owner, c.lease_until, c.last_heartbeat_at, c.delivery_count,
       c.available_at
FROM rehearsal_attempts a JOIN commands c ON c.id = a.command_id
WHERE a.run_id = :run_id ORDER BY a.seq;

-- name: attempt_receipts
-- instants: started_at, finished_at
SELECT id, attempt_id, position, scenario, status, delivery, evidence, evidence_fingerprint,
       started_at, finished_at
FROM rehearsal_receipts WHERE attempt_id = :attempt_id ORDER BY position;

-- name: latest_sealed_evidence
-- The evidence of the Receipt that finished last (ties: the greatest id): which seal key it names tells a
-- starting worker whether it holds the keys this control database's Receipts are sealed with (ADR 0064).
SELECT evidence FROM rehearsal_receipts
WHERE evidence IS NOT NULL AND finished_at IS NOT NULL
ORDER BY finished_at DESC, id DESC LIMIT 1;

-- name: start_attempt
-- First fenced write of a delivery: (re)start a non-terminal Attempt under this delivery number.
UPDATE rehearsal_attempts
SET status = 'RUNNING', delivery = :delivery, started_at = :now, error = NULL
WHERE id = :id AND status IN ('PENDING', 'RUNNING') AND {{lease_held}}
RETURNING run_id;

-- name: reset_receipts
-- Takeover replays from scratch: provisional evidence of a non-terminal Attempt is discarded.
UPDATE rehearsal_receipts
SET status = 'PENDING', delivery = NULL, evidence = NULL, evidence_fingerprint = NULL,
    started_at = NULL, finished_at = NULL
WHERE attempt_id = :attempt_id
  AND EXISTS (SELECT 1 FROM rehearsal_attempts a WHERE a.id = :attempt_id AND a.status IN ('PENDING', 'RUNNING'))
  AND {{lease_held}};

-- name: receipt_running
UPDATE rehearsal_receipts
SET status = 'RUNNING', delivery = :delivery, started_at = :now
WHERE attempt_id = :attempt_id AND position = :position AND status = 'PENDING' AND {{lease_held}};

-- name: receipt_finish
UPDATE rehearsal_receipts
SET status = :status, evidence = :evidence, evidence_fingerprint = :evidence_fingerprint, finished_at = :now
WHERE attempt_id = :attempt_id AND position = :position AND status = 'RUNNING' AND delivery = :delivery
  AND {{lease_held}};

-- name: abort_open_receipts
UPDATE rehearsal_receipts
SET status = 'ABORTED', finished_at = :now
WHERE attempt_id = :attempt_id AND status IN ('PENDING', 'RUNNING');

-- name: finish_attempt
-- Terminal outcome of a non-terminal Attempt, inside the unit that finishes its command.
UPDATE rehearsal_attempts
SET status = :status, finished_at = :now, error = :error
WHERE id = :id AND status IN ('PENDING', 'RUNNING') AND {{lease_held}};

-- name: abort_attempt
UPDATE rehearsal_attempts
SET status = 'ABORTED', finished_at = :now, error = :error
WHERE id = :id AND status IN ('PENDING', 'RUNNING')
RETURNING command_id;

-- name: retire_run
UPDATE rehearsal_runs SET status = 'RETIRED' WHERE id = :id AND status = 'READY';

-- name: runs_by_digest
-- instants: created_at
-- The rehearsals (Runs) of one exact package content, newest first: publishing checks their gate.
SELECT id, package_name, package_version, previous_version, content_digest, manifest, status, created_at
FROM rehearsal_runs WHERE content_digest = :content_digest ORDER BY created_at DESC, id;
