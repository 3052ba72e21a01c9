-- The PostgreSQL dialect: only the blocks that common files (../sql/*.sql) declare per-dialect.
--
-- The database clock decides lease expiry. :now is never a worker's clock here: it is the instant
-- PostgresExecutor.now() read from the server (SELECT clock_timestamp()) once per transaction, so every
-- row a decision writes and every lease event it records carry the same server instant, exactly as on
-- SQLite. Lease deadlines are computed by the server too (:now + make_interval(secs => :lease_seconds));
-- the :lease_until parameter that the SQLite dialect uses is ignored here.

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
-- Ids, not ctids: a row changed by a transaction that committed after this statement's snapshot is locked
-- in its newest version, which a tid scan under that snapshot cannot see (the row would stay locked and
-- unclaimed); found by primary key, the UPDATE follows the row to the version the CTE locked.
-- The same statement writes each claimed row's claim (delivery 1) or takeover history row at its instant,
-- the rows the caller would otherwise insert next: one round trip instead of two (ADR 0018).
-- :now is NULL in the worker's single-statement unit (ADR 0090): the statement's own instant is then the
-- clock (``clock`` below), exactly as the clock read with BEGIN is in a transaction block.
WITH clock AS MATERIALIZED (
    SELECT coalesce(:now::timestamptz, statement_timestamp()) AS now
), expired AS MATERIALIZED (
    SELECT id FROM commands
    WHERE status = 'PROCESSING' AND kind = :kind AND lease_until <= (SELECT now FROM clock)
    ORDER BY lease_until
    LIMIT :limit::integer
    FOR UPDATE SKIP LOCKED
), due AS MATERIALIZED (
    SELECT id FROM commands
    WHERE status = 'PENDING' AND kind = :kind AND available_at <= (SELECT now FROM clock)
    ORDER BY available_at
    LIMIT (SELECT :limit::integer - count(*) FROM expired)
    FOR UPDATE SKIP LOCKED
{{claim_rows}}

-- name: claim_given_commands
-- claim_commands over the listed ids only: each is found by primary key, then checked as claim_commands
-- checks it; history rows as in claim_commands.
WITH clock AS MATERIALIZED (
    SELECT coalesce(:now::timestamptz, statement_timestamp()) AS now
), given AS MATERIALIZED (
    SELECT DISTINCT value AS id FROM json_array_elements_text(:command_ids::json)
), expired AS MATERIALIZED (
    SELECT c.id FROM commands AS c
    WHERE c.id = ANY (ARRAY(SELECT id FROM given))
      AND c.status = 'PROCESSING' AND c.kind = :kind AND c.lease_until <= (SELECT now FROM clock)
    ORDER BY c.lease_until
    LIMIT :limit::integer
    FOR UPDATE SKIP LOCKED
), due AS MATERIALIZED (
    SELECT c.id FROM commands AS c
    WHERE c.id = ANY (ARRAY(SELECT id FROM given))
      AND c.status = 'PENDING' AND c.kind = :kind AND c.available_at <= (SELECT now FROM clock)
    ORDER BY c.available_at
    LIMIT (SELECT :limit::integer - count(*) FROM expired)
    FOR UPDATE SKIP LOCKED
{{claim_rows}}

-- fragment: claim_rows
-- The end of both claims: claim exactly the rows the CTEs ``expired`` and ``due`` picked, and write their
-- claim (delivery 1) or takeover history rows in the same statement.
), claimed AS (
    UPDATE commands AS c
    SET status = 'PROCESSING',
        lease_owner = :owner,
        lease_token = replace(gen_random_uuid()::text, '-', ''),
        lease_until = clock.now + make_interval(secs => :lease_seconds::double precision),
        last_heartbeat_at = clock.now,
        updated_at = clock.now,
        delivery_count = c.delivery_count + 1
    FROM clock
    WHERE c.id = ANY (ARRAY(SELECT id FROM expired UNION ALL SELECT id FROM due))
    RETURNING c.id, c.kind, c.payload, c.lease_owner, c.lease_token, c.lease_until, c.delivery_count, clock.now
), history AS (
    INSERT INTO lease_events (command_id, event, owner, delivery, at, lease_until)
    SELECT id, CASE WHEN delivery_count = 1 THEN 'claim' ELSE 'takeover' END, lease_owner, delivery_count,
           now, lease_until
    FROM claimed
)
SELECT id, kind, payload, lease_owner, lease_token, lease_until, delivery_count, true AS history_written
FROM claimed;

-- name: renew_lease
-- Heartbeat and fence: touches exactly one row only while the caller's token is current. A concurrent
-- takeover holds the row lock; this statement then waits and re-checks the token on the new version.
UPDATE commands
SET lease_until = :now + make_interval(secs => :lease_seconds::double precision),
    last_heartbeat_at = :now, updated_at = :now
WHERE id = :id AND lease_token = :token AND status = 'PROCESSING'
RETURNING lease_until, delivery_count;

-- name: finish_commands
-- Batched completion: every listed command whose token is still current becomes DELIVERED, in one
-- statement (one round trip). :leases is a JSON array of {"id", "token", "owner", "delivery"}; each row is
-- found by its primary key and changes only under its own token, re-checked on the newest row version
-- after any lock wait, exactly as finish_command would change it. The same statement writes a deliver
-- history row at :now for each delivered lease, in list order (ADR 0018). Returns the ids delivered.
-- Rows are found by primary key (= ANY of the listed ids). A non-null token implies PROCESSING (the table's
-- commands_token_iff_processing CHECK), so the statement does not name the status: naming it let the
-- planner AND in the partial PROCESSING index, whose entries for rows delivered since the last vacuum it
-- then read on every completion (the statement slowed as a run went on). :now as in claim_commands.
-- json_to_recordset parses the list once; `->>` on a json value re-parses the element for every field (ADR 0097).
WITH clock AS MATERIALIZED (
    SELECT coalesce(:now::timestamptz, statement_timestamp()) AS now
), wanted AS MATERIALIZED (
    SELECT l.id, l.token, l.owner, l.delivery, l.n
    FROM ROWS FROM (json_to_recordset(:leases::json) AS (id text, token text, owner text, delivery integer))
         WITH ORDINALITY AS l (id, token, owner, delivery, n)
), done AS (
    UPDATE commands AS c
    SET status = 'DELIVERED', lease_owner = NULL, lease_token = NULL, lease_until = NULL,
        finished_at = (SELECT now FROM clock), updated_at = (SELECT now FROM clock), last_error = NULL
    FROM wanted
    WHERE c.id = ANY (ARRAY(SELECT id FROM wanted)) AND c.id = wanted.id AND c.lease_token = wanted.token
    RETURNING c.id
), history AS (
    INSERT INTO lease_events (command_id, event, owner, delivery, at, lease_until)
    SELECT wanted.id, 'deliver', wanted.owner, wanted.delivery, (SELECT now FROM clock), NULL
    FROM wanted JOIN done ON done.id = wanted.id
    ORDER BY wanted.n
)
SELECT id, true AS history_written FROM done;

-- name: insert_lease_events
-- Several heartbeat-history rows sharing the instant :at, in list order, with one statement (one round
-- trip). :events is a JSON array of {"command_id", "event", "owner", "delivery", "lease_until"}.
INSERT INTO lease_events (command_id, event, owner, delivery, at, lease_until)
SELECT e.command_id, e.event, e.owner, e.delivery, :at, e.lease_until
FROM ROWS FROM (json_to_recordset(:events::json)
                AS (command_id text, event text, owner text, delivery integer, lease_until timestamptz))
     WITH ORDINALITY AS e (command_id, event, owner, delivery, lease_until, n)
ORDER BY e.n;

-- name: store_now
-- The store's clock: the server's, read when called (not the transaction start).
SELECT clock_timestamp() AS now;

-- name: insert_leased_command
-- A new command already PROCESSING under its producer's lease, at delivery 0 (ADR 0022); the server computes
-- the lease deadline, as for every claim.
INSERT INTO commands (id, kind, payload, status, available_at, created_at, updated_at, lease_owner, lease_token,
                      lease_until, last_heartbeat_at, delivery_count)
VALUES (:id, :kind, :payload, 'PROCESSING', :now, :now, :now, :owner, :token,
        :now + make_interval(secs => :lease_seconds::double precision), :now, 0)
RETURNING lease_until;

-- ──────────────────────────── rehearsal ────────────────────────────

-- name: next_attempt_seq
-- Serializes concurrent enqueues for one Run (Run row lock, then a fresh snapshot), as SQLite's write
-- reservation does; see fencepost_next_attempt_seq in schema.sql.
SELECT fencepost_next_attempt_seq(:run_id) AS seq;

-- name: lock_attempt
-- First lock of the Attempt-then-Outbox order: the Attempt row lock, held until the transaction ends.
SELECT id, status, command_id FROM rehearsal_attempts WHERE id = :id FOR UPDATE;

-- name: lock_package
-- Serializes guard changes and admissions of one package: the same guarantee SQLite's BEGIN IMMEDIATE
-- gives (no quarantine, disable or head move can commit between an admission's guard check and its
-- COMMIT). A transaction-scoped advisory lock, released at COMMIT or ROLLBACK.
SELECT 1 AS locked FROM (SELECT pg_advisory_xact_lock(hashtextextended('fencepost.package:' || :package_name, 0))) AS l;

-- fragment: lease_held
-- FOR SHARE keeps the condition true until COMMIT: a takeover's FOR UPDATE SKIP LOCKED claim skips the row,
-- and a reconcile or abort waits for this transaction.
EXISTS (SELECT 1 FROM commands AS lease WHERE lease.id = :lease_command_id AND lease.lease_token = :lease_token
        AND lease.status = 'PROCESSING' FOR SHARE)

-- ──────────────────────────── action host ────────────────────────────

-- fragment: json_text_array
json_array_elements_text(CAST(:expected AS json)) AS value

-- fragment: invocation_reconciliation_kind
(CAST(i.reconciliation AS json) ->> 'kind')

-- fragment: invocation_reconciliation_adapter
(CAST(i.reconciliation AS json) ->> 'adapter_invocation_id')

-- fragment: entity_lock
-- A transaction-scoped advisory lock on the entity's key (as lock_package's), released at COMMIT or ROLLBACK:
-- it locks an entity with no row yet too, which FOR UPDATE cannot, so two first transitions of one entity
-- cannot both read "no state". A hash collision only serializes two entities, never mixes their states.
pg_advisory_xact_lock(hashtextextended(
    'fencepost.entity:' || :tenant_id || chr(31) || :space_id || chr(31) || :subject || chr(31) || :entity_id, 0))

-- fragment: claimed_event_json
-- As text: the server refuses text that is not UTF-8 when it is written.
e.payload, e.actor, o.headers

-- fragment: event_payload_invocation
(CAST(e.payload AS json) ->> 'invocation_id')

-- fragment: lock_invocation_row
-- The invocation row lock, first in the host's lock order (invocation, adapter row, command; ADR 0022):
-- held until COMMIT, so a conditional adapter write and the verdict see one parent (host-spec I17).
LIMIT 1 FOR UPDATE OF i

-- name: claim_event_outbox
-- Lock the due rows with FOR UPDATE SKIP LOCKED (two relays never get the same row, and a claimer never
-- waits on a row another relay's transaction holds), then update exactly those, found by primary key. A row
-- changed by a concurrent committed claim is re-checked against the WHERE clause before it is locked.
-- :lease_until is :now (the server's instant of this transaction) plus the lease, added once by the caller.
WITH picked AS MATERIALIZED (
    SELECT o.event_id FROM host_event_outbox AS o JOIN host_events AS e ON e.id = o.event_id
    WHERE ((o.status IN ('pending', 'retry_pending') AND o.available_at <= :now)
           OR (o.status = 'processing' AND o.lease_until <= :now))
      AND substr(e.space_id, 1, 19) <> 'event-append-probe-'
    ORDER BY o.available_at, o.event_id
    LIMIT :limit::integer
    FOR UPDATE OF o SKIP LOCKED
)
UPDATE host_event_outbox AS o
SET status = 'processing', lease_owner = :owner, lease_token = replace(gen_random_uuid()::text, '-', ''),
    lease_until = :lease_until, attempts = o.attempts + 1, updated_at = :now
WHERE o.event_id = ANY (ARRAY(SELECT event_id FROM picked))
RETURNING o.event_id, o.lease_owner, o.lease_token, o.lease_until, o.attempts;

-- name: lock_workflow_run
-- The Run row FOR UPDATE: every progress transaction of one Run (frontier, start barrier, cancel, a task's
-- own check) runs one at a time, in commit order.
SELECT id FROM workflow_runs WHERE id = :id FOR UPDATE;

-- name: append_event_fused
-- The event and (with :with_outbox) its outbox row in one statement: one round trip where three were (ADR 0079).
-- The sequence is left NULL here and taken at COMMIT by the host_events_sequence_at_commit trigger (ADR 0096),
-- so the space's sequence row is locked for the commit only. The outbox row's foreign key is checked at the end
-- of the statement, so it sees the event inserted beside it. An id already stored inserts nothing (T1, T3).
WITH event AS (
    INSERT INTO host_events (id, tenant_id, space_id, sequence, subject_type, subject_id, type, occurred_at,
                             recorded_at, payload, actor)
    VALUES (:id, :tenant_id, :space_id, NULL, :subject_type, :subject_id, :type, :occurred_at, :now,
            :payload, :actor)
    ON CONFLICT (id) DO NOTHING
    RETURNING id
), outbox AS (
    INSERT INTO host_event_outbox (event_id, destination, headers, status, attempts, available_at, created_at,
                                   updated_at)
    SELECT event.id, :destination, :headers, 'pending', 0, :now, :now, :now
    FROM event
    WHERE :with_outbox
    RETURNING event_id
)
SELECT true AS fused, EXISTS (SELECT 1 FROM event) AS inserted, (SELECT count(*) FROM outbox) AS outboxed;

-- name: settle_event_sequences
-- Takes now the sequences this transaction's appends would take at COMMIT (ADR 0096), for a read of the log
-- in the transaction that appended: from here to COMMIT the space's sequence row stays locked, as before.
SET CONSTRAINTS host_events_sequence_at_commit IMMEDIATE;

-- name: audit_claimable_payload_not_an_object
-- fencepost_is_json first: a cast of text that is not JSON would end the audit with an error.
SELECT id AS subject, status || ' command payload is not a JSON object' AS detail
FROM commands
WHERE status IN ('PENDING', 'PROCESSING')
  AND CASE WHEN fencepost_is_json(payload) THEN json_typeof(payload::json) <> 'object' ELSE true END;

-- name: lock_worker_id
-- A transaction-scoped advisory lock on the id's 64-bit hash: concurrent registrations of one id wait for each
-- other's commit (a row lock cannot do it: the row may not exist yet). Released at COMMIT or ROLLBACK.
SELECT pg_advisory_xact_lock(hashtextextended('fencepost.workers:' || CAST(:id AS TEXT), 0));
