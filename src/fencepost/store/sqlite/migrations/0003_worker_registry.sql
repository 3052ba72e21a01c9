-- fencepost control schema, version 3: the worker registry (ADR 0019). One row per running worker process,
-- written by the worker itself: inserted when it starts, renewed by its heartbeat thread, deleted when it
-- stops. A row whose last_seen_at is older than three of its heartbeat intervals belongs to a worker that
-- stopped renewing (killed, hung, cut off); such rows are deleted by age. Nothing references this table:
-- it says who is running, never who owns what (leases do that).

CREATE TABLE workers (
    id                TEXT PRIMARY KEY CHECK (length(id) BETWEEN 1 AND 200),
    host              TEXT NOT NULL CHECK (length(host) BETWEEN 1 AND 255),
    pid               INTEGER NOT NULL CHECK (pid >= 1),
    kinds             TEXT NOT NULL CHECK (json_valid(kinds) AND json_type(kinds) = 'array'),
    concurrency       INTEGER NOT NULL CHECK (concurrency >= 1),
    in_flight         INTEGER NOT NULL CHECK (in_flight >= 0),
    heartbeat_seconds REAL NOT NULL CHECK (heartbeat_seconds > 0),
    version           TEXT NOT NULL CHECK (length(version) BETWEEN 1 AND 64),
    started_at        TEXT NOT NULL,
    last_seen_at      TEXT NOT NULL,
    CHECK (last_seen_at >= started_at)
);
