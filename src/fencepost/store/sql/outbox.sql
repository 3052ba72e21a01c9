-- The durable command outbox (seed: plugin-rehearsal-outbox-release-gate-design.md, "Durable Command" and
-- "Heartbeat And Takeover"). Common to every dialect; blocks marked per-dialect are declared here and written
-- in each <backend>/dialect.sql (fencepost.store.sql.queries explains the format). Instants arrive as
-- parameters read once per transaction from the store's clock (:now).

-- name: insert_command
-- A new PENDING command; the caller inserts its parent rows in the same transaction.
INSERT INTO commands (id, kind, payload, status, available_at, created_at, updated_at, delivery_count)
VALUES (:id, :kind, :payload, 'PENDING', :available_at, :now, :now, 0);

-- name: insert_leased_command
-- per-dialect
-- instants: lease_until
-- A new command already PROCESSING under a lease its producer holds (an inline host invocation's caller
-- lease, ADR 0022): delivery 0, so attempt_count counts worker claims only (host-spec A4); a worker takes it
-- over only after the lease expires (A8). :token is the fresh random token the producer generated.

-- name: notify_command
-- per-dialect
-- Wakes idle workers of :kind on PostgreSQL (LISTEN/NOTIFY, ADR 0014). SQLite has no notifications between
-- processes: its workers poll, so this is a no-op statement here.

-- name: claim_commands
-- per-dialect
-- instants: lease_until
-- One atomic conditional update for one kind: due PENDING rows and PROCESSING rows whose lease
-- expired, expired leases first (they waited longest). Each claimed row gets its own fresh random
-- token. One kind per statement keeps both scans pure index range scans (no sort of all due rows).
-- A dialect whose statement also writes the claim/takeover history rows returns history_written = true
-- on every row (the caller then writes none).

-- name: claim_given_commands
-- per-dialect
-- instants: lease_until
-- claim_commands restricted to the commands listed in :command_ids (a JSON array of ids), so that a caller
-- claims only its own work (issue 10 item 5: a rehearsal's in-process worker). The listed ids are found
-- by primary key; the rest is exactly claim_commands.

-- name: renew_lease
-- per-dialect
-- instants: lease_until
-- Heartbeat and fence: touches exactly one row only while the caller's token is current.

-- name: finish_command
-- Terminal outcome under the lease (DELIVERED or FAILED); clears the token.
UPDATE commands
SET status = :status, lease_owner = NULL, lease_token = NULL, lease_until = NULL,
    finished_at = :now, updated_at = :now, last_error = :error
WHERE id = :id AND lease_token = :token AND status = 'PROCESSING'
RETURNING delivery_count;

-- name: finish_commands
-- per-dialect
-- Batched completion: every listed command whose token is still current becomes DELIVERED, in one
-- statement. :leases is a JSON array of {"id", "token"}; each row is found by its primary key and changes
-- only under its own token, exactly as finish_command would change it. Returns the ids delivered. :leases
-- also carries each lease's "owner" and "delivery": a dialect whose statement writes the deliver history
-- rows itself (in list order) returns history_written = true on every row.

-- name: release_command
-- Graceful stop: give the command back at once instead of waiting for the lease to expire.
UPDATE commands
SET status = 'PENDING', lease_owner = NULL, lease_token = NULL, lease_until = NULL,
    available_at = :now, updated_at = :now
WHERE id = :id AND lease_token = :token AND status = 'PROCESSING'
RETURNING delivery_count, kind;

-- name: reconcile_command
-- instants: available_at, created_at, updated_at, lease_until, last_heartbeat_at, finished_at
-- Operator reconcile: only an expired PROCESSING lease returns to PENDING.
UPDATE commands
SET status = 'PENDING', lease_owner = NULL, lease_token = NULL, lease_until = NULL,
    available_at = :now, updated_at = :now
WHERE id = :id AND status = 'PROCESSING' AND lease_until <= :now
RETURNING id, kind, payload, status, available_at, created_at, updated_at, lease_owner, lease_until,
          last_heartbeat_at, delivery_count, finished_at, last_error;

-- name: abort_command
-- Operator abort: clears the token, which fences the active worker.
UPDATE commands
SET status = 'ABORTED', lease_owner = NULL, lease_token = NULL, lease_until = NULL,
    finished_at = :now, updated_at = :now, last_error = :error
WHERE id = :id AND status IN ('PENDING', 'PROCESSING')
RETURNING delivery_count;

-- name: get_command
-- instants: available_at, created_at, updated_at, lease_until, last_heartbeat_at, finished_at
-- Public view of one command: never the token.
SELECT id, kind, payload, status, available_at, created_at, updated_at, lease_owner, lease_until,
       last_heartbeat_at, delivery_count, finished_at, last_error
FROM commands WHERE id = :id;

-- name: insert_lease_event
INSERT INTO lease_events (command_id, event, owner, delivery, at, lease_until)
VALUES (:command_id, :event, :owner, :delivery, :at, :lease_until);

-- name: insert_lease_events
-- per-dialect
-- Several heartbeat-history rows sharing the instant :at, in list order. :events is a JSON array of
-- {"command_id", "event", "owner", "delivery", "lease_until"} (lease_until as fixed-width UTC text or null).

-- name: lease_events
-- instants: at, lease_until
SELECT seq, command_id, event, owner, delivery, at, lease_until
FROM lease_events WHERE command_id = :command_id ORDER BY seq;

-- name: count_commands_by_status
SELECT status, count(*) AS n FROM commands GROUP BY status;

-- name: pending_by_kind
-- instants: oldest_created_at
-- The PENDING backlog per kind whose name starts with :prefix, oldest first by its oldest command (the partial
-- PENDING index holds exactly these rows): what `fencepost workers` and `fencepost host status` set against the
-- live workers' kinds. Every row also carries the totals over all such kinds, before the LIMIT.
SELECT kind, count(*) AS pending, min(created_at) AS oldest_created_at,
       count(*) OVER () AS kinds_total, sum(count(*)) OVER () AS pending_total
FROM commands WHERE status = 'PENDING' AND substr(kind, 1, length(:prefix)) = :prefix
GROUP BY kind ORDER BY min(created_at), kind LIMIT :limit;

-- fragment: claim_rows
-- per-dialect
-- What claim_commands and claim_given_commands share once they have picked their rows: a fresh random token
-- and one more delivery per claimed row (and, on PostgreSQL, the claim or takeover history row).

-- fragment: lease_held
-- per-dialect
-- The lease condition of a child row written under a lease: true while the fenced unit's lease
-- (:lease_command_id, :lease_token) is the command's current one. Fenced units supply both parameters.

-- name: lease_check
-- The lease condition as a statement: one row while the fenced unit's lease is current.
SELECT 1 AS held WHERE {{lease_held}};

-- name: store_now
-- per-dialect
-- instants: now
-- The store's clock; on SQLite the caller supplies it.
