-- The host's event log and its publication outbox (host-spec T1-T8). Common to every dialect. An event id is
-- unique across the whole store and its first append wins (T1, T4): a later append of the same id is a
-- no-op that keeps the first event and adds no outbox row (T2, T3).

-- name: append_event_fused
-- per-dialect
-- The whole first write of event :id where a dialect can do it in one statement: the sequence as
-- next_event_sequence takes it, the event as insert_event writes it, and with :with_outbox its publication row as
-- insert_event_outbox writes it. Returns one row (fused = true, inserted: whether the event was stored now) when
-- it did; a dialect that cannot returns no row and the caller runs the three statements instead.

-- name: settle_event_sequences
-- per-dialect
-- Gives the events this transaction appended their sequences now, where a dialect takes them only at COMMIT
-- (ADR 0096), so that a read of the log inside the appending transaction sees every event with its sequence.

-- name: next_event_sequence
-- The next sequence of (:tenant_id, :space_id), taken only when no event :id exists yet: one row per space,
-- whose update serializes appenders of that space until COMMIT (PostgreSQL row lock; SQLite BEGIN
-- IMMEDIATE). No row returned: the id is already stored.
INSERT INTO host_event_sequences (tenant_id, space_id, last)
SELECT :tenant_id, :space_id, 1
WHERE NOT EXISTS (SELECT 1 FROM host_events WHERE id = :id)
ON CONFLICT (tenant_id, space_id) DO UPDATE SET last = host_event_sequences.last + 1
RETURNING last;

-- name: insert_event
-- The event under the sequence just taken; an id stored meanwhile by a concurrent append inserts nothing.
INSERT INTO host_events (id, tenant_id, space_id, sequence, subject_type, subject_id, type, occurred_at,
                         recorded_at, payload, actor)
VALUES (:id, :tenant_id, :space_id, :sequence, :subject_type, :subject_id, :type, :occurred_at, :now,
        :payload, :actor)
ON CONFLICT (id) DO NOTHING
RETURNING id;

-- name: insert_event_outbox
-- The publication row of an event this unit just inserted (never for an id that was already stored, T3).
INSERT INTO host_event_outbox (event_id, destination, headers, status, attempts, available_at, created_at,
                               updated_at)
VALUES (:event_id, :destination, :headers, 'pending', 0, :now, :now, :now);

-- fragment: event_columns
id, tenant_id, space_id, sequence, subject_type, subject_id, type, occurred_at, recorded_at, payload, actor

-- name: get_event
-- instants: occurred_at, recorded_at
SELECT {{event_columns}} FROM host_events WHERE id = :id;

-- name: list_events
-- instants: occurred_at, recorded_at
-- A space's events in sequence order after :after, optionally about one subject.
SELECT {{event_columns}} FROM host_events
WHERE tenant_id = :tenant_id AND space_id = :space_id AND sequence > :after
  AND (CAST(:subject_type AS TEXT) IS NULL OR subject_type = :subject_type)
  AND (CAST(:subject_id AS TEXT) IS NULL OR subject_id = :subject_id)
ORDER BY sequence
LIMIT :limit;

-- name: list_event_spaces
-- Every space that holds events, with its last sequence: one row per space in host_event_sequences (its
-- primary key orders it), never a scan of the log. Paged by key: the spaces after (:after_tenant, :after_space)
-- in the same order, all of them when :after_tenant is NULL.
SELECT tenant_id, space_id, last FROM host_event_sequences
WHERE CAST(:after_tenant AS TEXT) IS NULL OR tenant_id > :after_tenant
   OR (tenant_id = :after_tenant AND space_id > :after_space)
ORDER BY tenant_id, space_id LIMIT :limit;

-- ── the relay (issue 15, ADR 0038): the outbox lease protocol on host_event_outbox ──
-- A probe space (space_id starting 'event-append-probe-', 19 characters; host-spec U30) is never claimed nor
-- requeued. substr, not LIKE: LIKE folds ASCII case on SQLite and not on PostgreSQL.

-- name: claim_event_outbox
-- per-dialect
-- instants: lease_until
-- One atomic conditional update: due pending/retry_pending rows (available_at <= :now) and processing rows
-- whose lease expired, oldest availability first, at most :limit, never a probe space's. Each claimed row gets
-- a fresh random token, :owner, lease_until = :lease_until and one more attempt.

-- name: renew_event_lease
-- instants: lease_until
-- Heartbeat and fence: moves lease_until only while the caller's token is current.
UPDATE host_event_outbox SET lease_until = :lease_until, updated_at = :now
WHERE event_id = :event_id AND lease_token = :token AND status = 'processing'
RETURNING lease_until;

-- name: publish_event_outbox
-- The sink confirmed the event: published, under the claim's token only (a stale relay writes nothing).
UPDATE host_event_outbox
SET status = 'published', lease_owner = NULL, lease_token = NULL, lease_until = NULL, published_at = :now,
    updated_at = :now, last_error = NULL
WHERE event_id = :event_id AND lease_token = :token AND status = 'processing'
RETURNING event_id;

-- name: fail_event_outbox
-- A failed attempt: retry_pending from :available_at with its error, lease released, under the token only.
UPDATE host_event_outbox
SET status = 'retry_pending', lease_owner = NULL, lease_token = NULL, lease_until = NULL,
    available_at = :available_at, updated_at = :now, last_error = :error
WHERE event_id = :event_id AND lease_token = :token AND status = 'processing'
RETURNING event_id;

-- name: dead_letter_event_outbox
-- The attempt budget is spent: dead_lettered with the last error, under the token only.
UPDATE host_event_outbox
SET status = 'dead_lettered', lease_owner = NULL, lease_token = NULL, lease_until = NULL, updated_at = :now,
    last_error = :error
WHERE event_id = :event_id AND lease_token = :token AND status = 'processing'
RETURNING event_id;

-- name: release_event_outbox
-- Before publishing (a graceful stop, a sink that is unavailable): back at once, the claim's attempt given back
-- (nothing was tried), and its availability kept, so that it keeps its place in the queue: it was due when claimed,
-- and a row given back behind newer ones would be overtaken by them (ADR 0109).
UPDATE host_event_outbox
SET status = CASE WHEN attempts <= 1 THEN 'pending' ELSE 'retry_pending' END,
    attempts = CASE WHEN attempts >= 1 THEN attempts - 1 ELSE 0 END,
    lease_owner = NULL, lease_token = NULL, lease_until = NULL, updated_at = :now
WHERE event_id = :event_id AND lease_token = :token AND status = 'processing'
RETURNING event_id;

-- name: requeue_event_outbox
-- Operator requeue of a dead letter outside probe spaces: pending now with a fresh attempt budget; the last
-- error stays for the record until the next attempt.
UPDATE host_event_outbox
SET status = 'pending', attempts = 0, available_at = :now, updated_at = :now
WHERE event_id = :event_id AND status = 'dead_lettered'
  AND EXISTS (SELECT 1 FROM host_events AS e
              WHERE e.id = :event_id AND substr(e.space_id, 1, 19) <> 'event-append-probe-')
RETURNING event_id;

-- fragment: event_outbox_columns
o.event_id, o.destination, o.headers, o.status, o.attempts, o.lease_owner, o.lease_until, o.available_at,
o.published_at, o.last_error, o.created_at, o.updated_at, e.tenant_id, e.space_id, e.type

-- name: get_event_outbox_row
-- instants: lease_until, available_at, published_at, created_at, updated_at
-- One publication row with its event's scope (never the token).
SELECT {{event_outbox_columns}}
FROM host_event_outbox AS o JOIN host_events AS e ON e.id = o.event_id
WHERE o.event_id = :event_id;

-- name: list_event_outbox
-- instants: lease_until, available_at, published_at, created_at, updated_at
-- Publication rows, optionally of one status, oldest first (created_at, then id).
SELECT {{event_outbox_columns}}
FROM host_event_outbox AS o JOIN host_events AS e ON e.id = o.event_id
WHERE (CAST(:status AS TEXT) IS NULL OR o.status = :status)
ORDER BY o.created_at, o.event_id
LIMIT :limit;

-- name: summarize_event_outbox
-- instants: oldest
-- Rows per status and the oldest row's creation in each (the backlog's age for the unpublished states).
SELECT status, count(*) AS n, min(created_at) AS oldest FROM host_event_outbox GROUP BY status;

-- fragment: claimed_event_json
-- per-dialect
-- The claimed rows' JSON columns payload, actor and headers, as the port parses each row on its own (ADR 0101).

-- name: get_claimed_events
-- instants: occurred_at, recorded_at, lease_until, available_at, published_at, created_at, updated_at
-- The events and publication rows of the ids in the JSON array :expected (the rows a claim just took), in one
-- statement instead of two per row.
SELECT e.id, e.tenant_id, e.space_id, e.sequence, e.subject_type, e.subject_id, e.type, e.occurred_at,
       e.recorded_at, {{claimed_event_json}},
       o.event_id, o.destination, o.status, o.attempts, o.lease_owner, o.lease_until, o.available_at,
       o.published_at, o.last_error, o.created_at, o.updated_at
FROM host_event_outbox AS o JOIN host_events AS e ON e.id = o.event_id
WHERE o.event_id IN (SELECT value FROM {{json_text_array}});
