-- The host's event log and its publication outbox (host-spec T1-T8). Common to every dialect. An event id is
-- unique across the whole store and its first append wins (T1, T4): a later append of the same id is a
-- no-op that keeps the first event and adds no outbox row (T2, T3).

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

-- name: get_event_outbox
-- instants: available_at, created_at
SELECT event_id, destination, headers, status, attempts, available_at, created_at
FROM host_event_outbox WHERE event_id = :event_id;
