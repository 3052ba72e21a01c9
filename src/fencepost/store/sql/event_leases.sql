-- Leases on the event outbox rows for the store conformance checks (ADR 0040; host-spec U10-U15, U29-U35).
-- Every name here starts with probe_, apart from the relay's queries in events.sql.
-- Common to every dialect. Kept apart from events.sql (the relay's concern, issue 15), which may grow its own
-- claim; the lead merges the two. Instants arrive as parameters: a probe claims and publishes with the
-- caller's real current time (U26), not the store's clock.

-- fragment: probe_outbox_columns
o.event_id, e.tenant_id, e.space_id, o.destination, o.headers, o.status, o.attempts, o.lease_owner,
o.lease_token, o.lease_until, o.available_at, o.published_at, o.last_error, o.created_at, o.updated_at

-- name: probe_list_outbox_rows
-- instants: lease_until, available_at, published_at, created_at, updated_at
-- Every outbox row of one (tenant, space), whatever its status, in event order.
SELECT {{probe_outbox_columns}}
FROM host_event_outbox o JOIN host_events e ON e.id = o.event_id
WHERE e.tenant_id = :tenant_id AND e.space_id = :space_id
ORDER BY e.sequence;

-- name: probe_due_outbox_rows
-- The ids of due rows of :tenant_id (and :space_id when given): pending or retry-pending and available,
-- or processing under an expired lease; the longest waiting first.
SELECT o.event_id
FROM host_event_outbox o JOIN host_events e ON e.id = o.event_id
WHERE e.tenant_id = :tenant_id
  AND (CAST(:space_id AS TEXT) IS NULL OR e.space_id = :space_id)
  AND ((o.status IN ('pending', 'retry_pending') AND o.available_at <= :now)
       OR (o.status = 'processing' AND o.lease_until <= :now))
ORDER BY o.available_at, o.event_id
LIMIT :limit;

-- name: probe_lease_outbox_row
-- Lease one row found due: the due condition is repeated, so a concurrent claimer that took it first
-- leaves this statement nothing (PostgreSQL re-checks the row it waited for). Counts the attempt.
UPDATE host_event_outbox
SET status = 'processing', lease_owner = :owner, lease_token = :token, lease_until = :lease_until,
    attempts = attempts + 1, updated_at = :now
WHERE event_id = :event_id
  AND ((status IN ('pending', 'retry_pending') AND available_at <= :now)
       OR (status = 'processing' AND lease_until <= :now))
RETURNING event_id;

-- name: probe_publish_outbox_row
-- Published under the caller's lease; the lease is released.
UPDATE host_event_outbox
SET status = 'published', published_at = :at, lease_owner = NULL, lease_token = NULL, lease_until = NULL,
    updated_at = :at
WHERE event_id = :event_id AND status = 'processing' AND lease_owner = :owner AND lease_token = :token
RETURNING event_id;

-- name: probe_fail_outbox_row
-- A failed publication under the caller's lease: retry-pending from :available_at, the lease released.
UPDATE host_event_outbox
SET status = 'retry_pending', last_error = :error, available_at = :available_at, lease_owner = NULL,
    lease_token = NULL, lease_until = NULL, updated_at = :available_at
WHERE event_id = :event_id AND status = 'processing' AND lease_owner = :owner AND lease_token = :token
RETURNING event_id;

-- name: probe_dead_letter_outbox_row
-- Dead-lettered under the caller's lease with :reason as its last error; the lease released.
UPDATE host_event_outbox
SET status = 'dead_lettered', last_error = :reason, lease_owner = NULL, lease_token = NULL, lease_until = NULL,
    updated_at = :now
WHERE event_id = :event_id AND status = 'processing' AND lease_owner = :owner AND lease_token = :token
RETURNING event_id;

-- name: probe_get_outbox_row
-- instants: lease_until, available_at, published_at, created_at, updated_at
SELECT {{probe_outbox_columns}}
FROM host_event_outbox o JOIN host_events e ON e.id = o.event_id
WHERE o.event_id = :event_id;
