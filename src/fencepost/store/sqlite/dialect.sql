-- The SQLite dialect: only the blocks that common files (../sql/*.sql) declare per-dialect. Instants are
-- fixed-width UTC text (ADR 0001); the caller supplies every instant from the store's Clock.

-- name: notify_command
-- Wakes idle workers of :kind on PostgreSQL (LISTEN/NOTIFY, ADR 0014). SQLite has no notifications between
-- processes: its workers poll, so this is a no-op statement here.
SELECT 1;

-- name: claim_commands
-- One atomic conditional update for one kind: due PENDING rows and PROCESSING rows whose lease
-- expired, expired leases first (they waited longest). Each claimed row gets its own fresh random
-- token. One kind per statement keeps both scans pure index range scans (no sort of all due rows).
-- The payload comes back as bytes: a row whose text is not UTF-8 (written past the outbox port) then fails
-- alone when the worker reads it, where decoding it as text failed the whole claim, for every worker.
{{claim_rows}}
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
RETURNING id, kind, CAST(payload AS BLOB) AS payload, lease_owner, lease_token, lease_until, delivery_count;

-- name: claim_given_commands
-- claim_commands over the listed ids only (each found by primary key).
{{claim_rows}}
WHERE id IN (
    SELECT id FROM (
        SELECT id FROM commands
        WHERE id IN (SELECT value FROM json_each(:command_ids))
          AND status = 'PROCESSING' AND kind = :kind AND lease_until <= :now
        ORDER BY lease_until LIMIT :limit)
    UNION ALL
    SELECT id FROM (
        SELECT id FROM commands
        WHERE id IN (SELECT value FROM json_each(:command_ids))
          AND status = 'PENDING' AND kind = :kind AND available_at <= :now
        ORDER BY available_at LIMIT :limit)
    LIMIT :limit)
RETURNING id, kind, CAST(payload AS BLOB) AS payload, lease_owner, lease_token, lease_until, delivery_count;

-- fragment: claim_rows
-- What both claims write to each row they claim: a fresh random token per row, one more delivery.
UPDATE commands
SET status = 'PROCESSING',
    lease_owner = :owner,
    lease_token = lower(hex(randomblob(16))),
    lease_until = :lease_until,
    last_heartbeat_at = :now,
    updated_at = :now,
    delivery_count = delivery_count + 1

-- name: renew_lease
-- Heartbeat and fence: touches exactly one row only while the caller's token is current.
UPDATE commands
SET lease_until = :lease_until, last_heartbeat_at = :now, updated_at = :now
WHERE id = :id AND lease_token = :token AND status = 'PROCESSING'
RETURNING lease_until, delivery_count;

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

-- name: insert_lease_events
-- Several heartbeat-history rows sharing the instant :at, in list order. :events is a JSON array of
-- {"command_id", "event", "owner", "delivery", "lease_until"} (lease_until as fixed-width UTC text or null).
INSERT INTO lease_events (command_id, event, owner, delivery, at, lease_until)
SELECT json_extract(e.value, '$.command_id'), json_extract(e.value, '$.event'), json_extract(e.value, '$.owner'),
       json_extract(e.value, '$.delivery'), :at, json_extract(e.value, '$.lease_until')
FROM json_each(:events) AS e
ORDER BY e.key;

-- name: store_now
-- The store's clock; on SQLite the caller supplies it.
SELECT :now AS now;

-- name: insert_leased_command
-- A new command already PROCESSING under its producer's lease, at delivery 0 (ADR 0022).
INSERT INTO commands (id, kind, payload, status, available_at, created_at, updated_at, lease_owner, lease_token,
                      lease_until, last_heartbeat_at, delivery_count)
VALUES (:id, :kind, :payload, 'PROCESSING', :now, :now, :now, :owner, :token, :lease_until, :now, 0)
RETURNING lease_until;

-- ──────────────────────────── rehearsal ────────────────────────────

-- name: next_attempt_seq
SELECT coalesce(max(seq), 0) + 1 AS seq FROM rehearsal_attempts WHERE run_id = :run_id;

-- name: lock_attempt
-- First lock of the Attempt-then-Outbox order (a plain read under SQLite's write reservation).
SELECT id, status, command_id FROM rehearsal_attempts WHERE id = :id;

-- name: lock_package
-- Serializes guard changes and admissions of one package. SQLite's BEGIN IMMEDIATE already holds the
-- database write reservation, so this is a no-op here.
SELECT 1 AS locked;

-- fragment: lease_held
-- Writes are serialized by BEGIN IMMEDIATE: the condition holds until COMMIT.
EXISTS (SELECT 1 FROM commands AS lease WHERE lease.id = :lease_command_id AND lease.lease_token = :lease_token
        AND lease.status = 'PROCESSING')

-- ──────────────────────────── action host ────────────────────────────

-- fragment: json_text_array
json_each(:expected)

-- fragment: invocation_reconciliation_kind
json_extract(i.reconciliation, '$.kind')

-- fragment: invocation_reconciliation_adapter
json_extract(i.reconciliation, '$.adapter_invocation_id')

-- fragment: entity_lock
-- SQLite's BEGIN IMMEDIATE already holds the database write reservation: no other writer can change the entity.
1

-- fragment: claimed_event_json
-- As BLOBs, decoded by the port: text that is not UTF-8 is then one unreadable row, set aside by the relay, and
-- not a driver error that failed the whole claim (ADR 0101; the command claim does the same, ADR 0100).
CAST(e.payload AS BLOB) AS payload, CAST(e.actor AS BLOB) AS actor, CAST(o.headers AS BLOB) AS headers

-- fragment: event_payload_invocation
json_extract(e.payload, '$.invocation_id')

-- fragment: lock_invocation_row
-- BEGIN IMMEDIATE holds the write reservation: the row cannot change until COMMIT.
LIMIT 1

-- name: claim_event_outbox
-- One UPDATE over the picked ids: BEGIN IMMEDIATE already serializes claimers, so no row is claimed twice.
UPDATE host_event_outbox
SET status = 'processing', lease_owner = :owner, lease_token = lower(hex(randomblob(16))),
    lease_until = :lease_until, attempts = attempts + 1, updated_at = :now
WHERE event_id IN (
    SELECT o.event_id FROM host_event_outbox AS o JOIN host_events AS e ON e.id = o.event_id
    WHERE ((o.status IN ('pending', 'retry_pending') AND o.available_at <= :now)
           OR (o.status = 'processing' AND o.lease_until <= :now))
      AND substr(e.space_id, 1, 19) <> 'event-append-probe-'
    ORDER BY o.available_at, o.event_id
    LIMIT :limit)
RETURNING event_id, lease_owner, lease_token, lease_until, attempts;

-- name: lock_workflow_run
-- BEGIN IMMEDIATE already holds the database write reservation: nothing to lock.
SELECT 1 AS locked;

-- name: append_event_fused
-- SQLite has no data-modifying CTEs: no row, and the caller runs next_event_sequence, insert_event and
-- insert_event_outbox (three calls into the same process, no round trips to save).
SELECT 1 AS fused WHERE 0;

-- name: settle_event_sequences
-- Nothing to settle: on SQLite the append takes its sequence itself (one writer at a time).
SELECT 1 AS settled WHERE 0;

-- name: audit_claimable_payload_not_an_object
SELECT id AS subject, status || ' command payload is not a JSON object' AS detail
FROM commands
WHERE status IN ('PENDING', 'PROCESSING') AND (NOT json_valid(payload) OR json_type(payload) <> 'object');

-- name: lock_worker_id
-- Nothing to take: a write transaction holds SQLite's one write lock from its start (BEGIN IMMEDIATE), so
-- registrations already run one at a time. A no-op statement keeps the port's call the same on both.
SELECT CAST(:id AS TEXT) AS id;
