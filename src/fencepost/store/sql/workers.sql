-- The worker registry (ADR 0019): one row per running worker process. Common to every dialect. Instants
-- arrive as parameters read once per transaction from the store's clock (:now); rows come back with every
-- column the typed row needs.

-- name: register_worker
-- instants: started_at, last_seen_at
-- Upsert: a new row, or a worker id seen again (a restart under the same --worker-id, a registration
-- renewed after its row was deleted by age) starts over as a fresh registration.
INSERT INTO workers (id, host, pid, kinds, concurrency, in_flight, heartbeat_seconds, version, started_at,
                     last_seen_at)
VALUES (:id, :host, :pid, :kinds, :concurrency, :in_flight, :heartbeat_seconds, :version, :now, :now)
ON CONFLICT (id) DO UPDATE
SET host = excluded.host, pid = excluded.pid, kinds = excluded.kinds, concurrency = excluded.concurrency,
    in_flight = excluded.in_flight, heartbeat_seconds = excluded.heartbeat_seconds, version = excluded.version,
    started_at = excluded.started_at, last_seen_at = excluded.last_seen_at
RETURNING id, host, pid, kinds, concurrency, in_flight, heartbeat_seconds, version, started_at, last_seen_at;

-- name: lock_worker_id
-- per-dialect
-- Serializes the registrations of one worker id until the transaction ends, so that the check for a live
-- holder and the upsert after it are one step for concurrent starts (two workers given one --worker-id at once).

-- name: beat_worker
-- instants: started_at, last_seen_at
-- The heartbeat of a registration: renews last_seen_at and what the worker holds now. No row: it was
-- deleted (stopped, or expired and removed by age).
-- With :host and :pid, only that process's row: a row another process wrote under the same id is not renewed.
UPDATE workers SET last_seen_at = :now, in_flight = :in_flight
WHERE id = :id AND (CAST(:host AS TEXT) IS NULL OR (host = CAST(:host AS TEXT) AND pid = CAST(:pid AS INTEGER)))
RETURNING id, host, pid, kinds, concurrency, in_flight, heartbeat_seconds, version, started_at, last_seen_at;

-- name: deregister_worker
-- A graceful stop removes the row: a stopped worker is not a fact anybody needs later. With :host and :pid,
-- only that process's row (a duplicate --worker-id that stops never removes the live worker's registration).
DELETE FROM workers
WHERE id = :id AND (CAST(:host AS TEXT) IS NULL OR (host = CAST(:host AS TEXT) AND pid = CAST(:pid AS INTEGER)));

-- name: list_workers
-- instants: started_at, last_seen_at
SELECT id, host, pid, kinds, concurrency, in_flight, heartbeat_seconds, version, started_at, last_seen_at
FROM workers ORDER BY started_at, id;

-- name: expire_workers
-- instants: started_at, last_seen_at
-- Removes the registrations not renewed since :cutoff (the caller's age before the store's now).
DELETE FROM workers WHERE last_seen_at < :cutoff
RETURNING id, host, pid, kinds, concurrency, in_flight, heartbeat_seconds, version, started_at, last_seen_at;
