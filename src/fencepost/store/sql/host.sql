-- The action host (host-spec sections A, B, C, E, I, K, L13, H17, N; ADRs 0022-0027, 0032, 0034): invocations,
-- their adapter rows, the reconciliation logs and the external completion handoffs.
-- Common to every dialect; blocks marked per-dialect are written in each <backend>/dialect.sql. Instants
-- arrive as parameters read once per transaction from the store's clock (:now).
--
-- Lock order (ADR 0022): the invocation row, then its adapter row, then the bound entity's state (ADR 0077),
-- then the command (the lease, last).

-- name: insert_invocation
-- A new invocation; an existing id (the derived id of the same tenant, space, action and key: ADR 0023) or
-- the same key under another id inserts nothing, and the caller reads the winner (host-spec B7).
INSERT INTO invocations (id, tenant_id, space_id, action_id, action_version, idempotency_key, actor, authority,
                         binding_digest, params_digest, params, mode, status, created_at, updated_at)
VALUES (:id, :tenant_id, :space_id, :action_id, :action_version, :idempotency_key, :actor, :authority,
        :binding_digest, :params_digest, :params, :mode, :status, :now, :now)
ON CONFLICT DO NOTHING
RETURNING id;

-- name: bind_invocation_state
-- A state-bound action's invocation names its entity and target (ADR 0077), in the unit that just inserted it.
-- A separate statement so that the insert every other invocation takes names no column of migration 0011.
UPDATE invocations
SET state_subject = :state_subject, state_entity_id = :state_entity_id, state_target = :state_target
WHERE id = :id AND state_subject IS NULL;

-- fragment: invocation_columns
i.id, i.tenant_id, i.space_id, i.action_id, i.action_version, i.idempotency_key, i.actor, i.authority,
i.binding_digest, i.params_digest, i.params, i.mode, i.status, i.error, i.result, i.reconciliation,
i.pending_completion, i.created_at, i.updated_at, coalesce(c.delivery_count, 0) AS attempt_count,
c.lease_owner, c.lease_until, c.status AS command_status, i.handoff_provider, i.handoff_reference,
i.completion_due_at, i.parked_at, i.overdue_at, i.external_completion, i.state_subject, i.state_entity_id,
i.state_target

-- name: get_invocation
-- instants: created_at, updated_at, lease_until, completion_due_at, parked_at, overdue_at
SELECT {{invocation_columns}}
FROM invocations AS i LEFT JOIN commands AS c ON c.id = i.id
WHERE i.id = :id;

-- name: lock_invocation
-- instants: created_at, updated_at, lease_until, completion_due_at, parked_at, overdue_at
-- The first lock of the host's order: the invocation row (FOR UPDATE on PostgreSQL, host-spec I17), read
-- with its command's public lease columns.
SELECT {{invocation_columns}}
FROM invocations AS i LEFT JOIN commands AS c ON c.id = i.id
WHERE i.id = :id
{{lock_invocation_row}};

-- name: get_store_identity
-- The control database's random identity, made by migration 0017 (ADR 0108).
SELECT id FROM store_identity WHERE singleton = 1;

-- name: find_invocation_by_key
-- instants: created_at, updated_at, lease_until, completion_due_at, parked_at, overdue_at
SELECT {{invocation_columns}}
FROM invocations AS i LEFT JOIN commands AS c ON c.id = i.id
WHERE i.tenant_id = :tenant_id AND i.space_id = :space_id AND i.action_id = :action_id
  AND i.idempotency_key = :idempotency_key;

-- name: list_invocations
-- instants: created_at, updated_at, lease_until, completion_due_at, parked_at, overdue_at
-- Newest first; each filter applies only when given.
SELECT {{invocation_columns}}
FROM invocations AS i LEFT JOIN commands AS c ON c.id = i.id
WHERE (CAST(:tenant_id AS TEXT) IS NULL OR i.tenant_id = :tenant_id)
  AND (CAST(:space_id AS TEXT) IS NULL OR i.space_id = :space_id)
  AND (CAST(:status AS TEXT) IS NULL OR i.status = :status)
  AND (CAST(:action_id AS TEXT) IS NULL OR i.action_id = :action_id)
ORDER BY i.created_at DESC, i.id DESC
LIMIT :limit;

-- name: update_leased_invocation
-- The verdict or status of an invocation under its lease (host-spec C3, C4): changes the row only while it is
-- in one of :expected (a JSON array of statuses) and the lease the execution captured is still its command's
-- current one. The fenced unit's fence (renewal or finish of the command) still comes last.
UPDATE invocations
SET status = :status, error = :error, result = :result, reconciliation = :reconciliation, updated_at = :now
WHERE id = :id AND status IN (SELECT value FROM {{json_text_array}})
  AND {{lease_held}};

-- name: lock_invocation_for_adapter_write
-- The parent check of a conditional adapter write (host-spec I2, I3, I5) and of an entity state write (ADR
-- 0077): the row in the write's scope, in the same lock order as every host write.
SELECT i.status, i.error FROM invocations AS i
WHERE i.id = :invocation_id AND i.tenant_id = :tenant_id AND i.space_id = :space_id
{{lock_invocation_row}};

-- name: insert_adapter_invocation
-- A new adapter row in its parent's scope; an existing id inserts nothing (host-spec I6).
INSERT INTO adapter_invocations (id, tenant_id, space_id, invocation_id, step_index, step_name, adapter_type,
                                 operation, vendor, input, output, status, error, attempts, external_reference,
                                 reconciliation, created_at, updated_at)
VALUES (:id, :tenant_id, :space_id, :invocation_id, :step_index, :step_name, :adapter_type, :operation, :vendor,
        :input, :output, :status, :error, :attempts, :external_reference, :reconciliation, :now, :now)
ON CONFLICT DO NOTHING
RETURNING id;

-- name: update_adapter_invocation
-- A status transition of an adapter row with its evidence (host-spec E4), in the write's scope, from one of
-- :expected (a JSON array; NULL: any), and never from succeeded or ambiguous to running or failed (I7; the
-- trigger adapter_invocations_no_regression refuses it too, whatever writes it).
UPDATE adapter_invocations
SET status = :status, error = :error, output = coalesce(:output, output),
    external_reference = coalesce(:external_reference, external_reference),
    reconciliation = coalesce(:reconciliation, reconciliation), attempts = coalesce(:attempts, attempts),
    updated_at = :now
WHERE id = :id AND tenant_id = :tenant_id AND space_id = :space_id AND invocation_id = :invocation_id
  AND (CAST(:expected AS TEXT) IS NULL OR status IN (SELECT value FROM {{json_text_array}}))
  AND NOT (status IN ('succeeded', 'ambiguous') AND :status IN ('running', 'failed'))
RETURNING id;

-- fragment: adapter_columns
id, tenant_id, space_id, invocation_id, step_index, step_name, adapter_type, operation, vendor, input, output,
status, error, attempts, external_reference, reconciliation, created_at, updated_at

-- name: get_adapter_invocation
-- instants: created_at, updated_at
SELECT {{adapter_columns}} FROM adapter_invocations WHERE id = :id;

-- name: list_adapter_invocations
-- instants: created_at, updated_at
-- An invocation's adapter rows in step order.
SELECT {{adapter_columns}} FROM adapter_invocations WHERE invocation_id = :invocation_id ORDER BY step_index;

-- name: update_settled_invocation
-- Parent enrichment after a settled verdict (host-spec H17, I3): the error and the reconciliation evidence,
-- replaced, only while the row still holds exactly the verdict this execution wrote (:held_status and
-- :held_error, NULL-safe: an absent error matches only an absent one). The UPDATE takes the invocation row
-- lock, first in the host's lock order, and touches nothing else.
UPDATE invocations
SET error = :error, reconciliation = :reconciliation, updated_at = :now
WHERE id = :id AND status = :held_status
  AND (error = CAST(:held_error AS TEXT) OR (error IS NULL AND CAST(:held_error AS TEXT) IS NULL))
RETURNING id;

-- ── the reconciliation logs (ADR 0032; host-spec K1, L13) ──

-- name: insert_reconciliation
-- An entry of one log, only when its parent exists in the entry's scope (host-spec V: an entry naming a parent
-- of another tenant or space inserts nothing, before the composite reference would refuse it); an existing
-- (id, log) inserts nothing and keeps the first entry (L13).
INSERT INTO host_reconciliations (id, log, tenant_id, space_id, invocation_id, adapter_invocation_id, kind,
                                  payload, created_at)
SELECT :id, :log, i.tenant_id, i.space_id, i.id, :adapter_invocation_id, :kind, :payload, :now
FROM invocations AS i
WHERE i.id = :invocation_id AND i.tenant_id = :tenant_id AND i.space_id = :space_id
ON CONFLICT (id, log) DO NOTHING
RETURNING id;

-- name: list_reconciliations
-- instants: created_at
-- An invocation's entries of both logs, oldest first.
SELECT id, log, tenant_id, space_id, invocation_id, adapter_invocation_id, kind, payload, created_at
FROM host_reconciliations WHERE invocation_id = :invocation_id
ORDER BY created_at, id, log;

-- ── external completion handoffs (ADR 0034; host-spec N) ──

-- name: record_handoff
-- A step's handoff (N1, E6), durable before its marker: only while the invocation is running, holds no
-- handoff yet (one per invocation) and the lease the execution captured is its command's current one.
UPDATE invocations
SET handoff_provider = :provider, handoff_reference = :reference, pending_completion = :details,
    completion_due_at = :due_at, updated_at = :now
WHERE id = :id AND status = 'running' AND handoff_reference IS NULL
  AND {{lease_held}};

-- name: park_invocation
-- Parking (N2) after the remaining steps and finalization: parked_at from the unit's clock with the pending
-- details, once, while running under the current lease. The caller's fenced unit then finishes the command.
UPDATE invocations
SET parked_at = :now, pending_completion = :pending_completion, updated_at = :now
WHERE id = :id AND status = 'running' AND handoff_reference IS NOT NULL AND parked_at IS NULL
  AND {{lease_held}};

-- name: find_handoffs
-- instants: created_at, updated_at, lease_until, completion_due_at, parked_at, overdue_at
-- The invocations of one handoff (N30: matched by provider and reference only, exactly), any status, oldest
-- first; invocations_by_handoff serves it.
SELECT {{invocation_columns}}
FROM invocations AS i LEFT JOIN commands AS c ON c.id = i.id
WHERE i.handoff_provider = :provider AND i.handoff_reference = :reference
ORDER BY i.created_at, i.id;

-- name: list_overdue_handoffs
-- instants: created_at, updated_at, lease_until, completion_due_at, parked_at, overdue_at
-- The sweep's candidates (N12): running handoffs due by :now, not yet overdue, whose command holds no live
-- lease (not PROCESSING, or its lease expired), oldest due first; invocations_handoffs_due serves the scan.
-- Each is re-checked under its row lock before any write (N14).
SELECT {{invocation_columns}}
FROM invocations AS i LEFT JOIN commands AS c ON c.id = i.id
WHERE i.status = 'running' AND i.completion_due_at IS NOT NULL AND i.completion_due_at <= :now
  AND i.handoff_reference IS NOT NULL AND i.overdue_at IS NULL
  AND (c.id IS NULL OR c.status != 'PROCESSING' OR c.lease_until <= :now)
ORDER BY i.completion_due_at, i.id
LIMIT :limit;

-- name: host_health
-- The host's health counts (host-spec W2, §1.Y-15; ADR 0051), one row in one snapshot, each over a status
-- index (invocations_by_status, host_event_outbox_due). overdue_handoffs is list_overdue_handoffs' condition.
-- stuck_runs: running, not parked, no live lease since before :stuck_before and unchanged since then.
-- budget_exhaustions: still open, kind recovery_budget_exhausted, written since :since. A probe space is
-- space_id starting 'event-append-probe-' (19 characters, as the relay's claim; substr, not LIKE).
SELECT
  (SELECT COUNT(*) FROM invocations AS i WHERE i.status = 'reconciliation_required') AS open_reconciliations,
  (SELECT COUNT(*) FROM invocations AS i LEFT JOIN commands AS c ON c.id = i.id
   WHERE i.status = 'running' AND i.completion_due_at IS NOT NULL AND i.completion_due_at <= :now
     AND i.handoff_reference IS NOT NULL AND i.overdue_at IS NULL
     AND (c.id IS NULL OR c.status != 'PROCESSING' OR c.lease_until <= :now)) AS overdue_handoffs,
  (SELECT COUNT(*) FROM invocations AS i LEFT JOIN commands AS c ON c.id = i.id
   WHERE i.status = 'running' AND i.parked_at IS NULL AND i.updated_at <= :stuck_before
     AND (c.id IS NULL OR c.status != 'PROCESSING' OR c.lease_until <= :stuck_before)) AS stuck_runs,
  (SELECT COUNT(*) FROM invocations AS i
   WHERE i.status = 'reconciliation_required' AND i.updated_at >= :since
     AND {{invocation_reconciliation_kind}} = 'recovery_budget_exhausted') AS budget_exhaustions,
  (SELECT COUNT(*) FROM host_event_outbox AS o JOIN host_events AS e ON e.id = o.event_id
   WHERE o.status = 'dead_lettered' AND substr(e.space_id, 1, 19) <> 'event-append-probe-') AS dead_letters,
  (SELECT COUNT(*) FROM host_event_outbox AS o JOIN host_events AS e ON e.id = o.event_id
   WHERE o.status = 'dead_lettered' AND substr(e.space_id, 1, 19) = 'event-append-probe-') AS probe_dead_letters;

-- name: lock_unleased_invocation
-- update_unleased_invocation's first step: the invocation row lock, first in the host's lock order (the
-- caller normally holds it already from lock_invocation), and its status.
SELECT i.status FROM invocations AS i
WHERE i.id = :id
{{lock_invocation_row}};

-- name: finish_unleased_command
-- The command of an invocation settled without a lease (N8, N12): a PENDING one, or a PROCESSING one whose
-- lease expired, becomes DELIVERED with its lease cleared, as finish_command leaves it, so that no worker
-- claims it again. A live lease matches nothing (the caller then changes nothing).
UPDATE commands
SET status = 'DELIVERED', lease_owner = NULL, lease_token = NULL, lease_until = NULL,
    finished_at = :now, updated_at = :now
WHERE id = :id AND (status = 'PENDING' OR (status = 'PROCESSING' AND lease_until <= :now))
RETURNING delivery_count;

-- name: command_leased
-- Whether the invocation's command holds a live lease now: read after finish_unleased_command matched
-- nothing, so a claim that committed between the row lock and that UPDATE is seen (PostgreSQL re-reads the
-- row it waited for; SQLite's BEGIN IMMEDIATE admits no such claim).
SELECT 1 AS leased FROM commands WHERE id = :id AND status = 'PROCESSING' AND lease_until > :now;

-- name: update_unleased_invocation
-- The full row an unleased writer decided under the row lock (N8, N12, N14): only while the status is still
-- :expected.
UPDATE invocations
SET status = :status, error = :error, result = :result, reconciliation = :reconciliation,
    pending_completion = :pending_completion, external_completion = :external_completion,
    parked_at = :parked_at, overdue_at = :overdue_at, updated_at = :now
WHERE id = :id AND status = :expected
RETURNING id;

-- fragment: json_text_array
-- per-dialect
-- The strings of the JSON array :expected, as a relation with one column named value.

-- fragment: invocation_reconciliation_kind
-- per-dialect
-- The text of the "kind" field of the reconciliation JSON of the invocation aliased i (NULL when absent).

-- fragment: invocation_reconciliation_adapter
-- per-dialect
-- The text of the "adapter_invocation_id" field of the reconciliation JSON of the invocation aliased i.

-- fragment: lock_invocation_row
-- per-dialect
-- Ends a primary-key lookup of one invocation (alias i): locks it until the transaction ends on PostgreSQL
-- (FOR UPDATE); SQLite's BEGIN IMMEDIATE already serializes every writer.

-- name: get_adapter_invocation_in_scope
-- instants: created_at, updated_at
-- Tenant isolation (host-spec V1, V2; ADR 0040): the row only when it lives in the given scope, so that a read
-- naming another tenant, space or invocation finds nothing.
SELECT {{adapter_columns}} FROM adapter_invocations
WHERE id = :id AND tenant_id = :tenant_id AND space_id = :space_id AND invocation_id = :invocation_id;

-- ── governance evidence (ADRs 0043-0045; host-spec D5, D6, O, P) ──

-- name: insert_governance_record
-- A governance record, only when its parent exists in the record's scope (host-spec V); an existing id inserts
-- nothing and keeps the first record (first write wins across attempts, §1.Y-6).
INSERT INTO host_governance_records (id, kind, tenant_id, space_id, invocation_id, name, payload, fingerprint,
                                     created_at)
SELECT :id, :kind, i.tenant_id, i.space_id, i.id, :name, :payload, :fingerprint, :now
FROM invocations AS i
WHERE i.id = :invocation_id AND i.tenant_id = :tenant_id AND i.space_id = :space_id
ON CONFLICT (id) DO NOTHING
RETURNING id;

-- name: list_governance_records
-- instants: created_at
-- An invocation's governance records, oldest first.
SELECT id, kind, tenant_id, space_id, invocation_id, name, payload, fingerprint, created_at
FROM host_governance_records WHERE invocation_id = :invocation_id
ORDER BY created_at, id;

-- name: resume_awaiting_invocation
-- An approved invocation back to running (host-spec P3, P4; ADR 0044), only while it awaits approval and its
-- command is finished (no lease holds it); the caller leases the command next, in the same unit.
UPDATE invocations
SET status = 'running', updated_at = :now
WHERE id = :id AND status = 'awaiting_approval'
  AND EXISTS (SELECT 1 FROM commands AS c WHERE c.id = :id AND c.status = 'DELIVERED')
RETURNING id;

-- name: lease_approved_command
-- instants: lease_until
-- The approval resume's temporary lease (P4): the finished command PROCESSING again under a fresh token, its
-- delivery count raised to at least 1 and never incremented (P3: approval acceptance counts no claim).
UPDATE commands
SET status = 'PROCESSING', lease_owner = :owner, lease_token = :token, lease_until = :lease_until,
    last_heartbeat_at = :now, finished_at = NULL, updated_at = :now,
    delivery_count = CASE WHEN delivery_count < 1 THEN 1 ELSE delivery_count END
WHERE id = :id AND status = 'DELIVERED'
RETURNING delivery_count, lease_until;

-- ── the recorded state of bound entities (ADR 0077; host-spec A13, A17, A19) ──

-- fragment: entity_lock
-- per-dialect
-- An expression that takes the lock of one entity (:tenant_id, :space_id, :subject, :entity_id) until the
-- transaction ends, whether or not it has a recorded state yet.

-- name: lock_entity
-- The entity's lock, held until the transaction ends: a guard's read and the write that depends on it see one
-- state. After the invocation row and its adapter rows in the host's lock order, before the command.
SELECT {{entity_lock}} AS locked;

-- fragment: entity_state_columns
tenant_id, space_id, subject, entity_id, state, previous_state, updated_by_invocation, updated_at

-- name: get_entity_state
-- instants: updated_at
SELECT {{entity_state_columns}} FROM entity_states
WHERE tenant_id = :tenant_id AND space_id = :space_id AND subject = :subject AND entity_id = :entity_id;

-- name: set_entity_state
-- instants: updated_at
-- Record :state for the entity, set by :invocation_id (the caller checked that invocation is running under its
-- lease, in the entity's scope, and holds the entity's lock). previous_state keeps the state the entity had
-- before that invocation first changed it: a second change by the same invocation keeps it. The same state
-- again changes nothing (no row returned), so a state an earlier change set is kept with its provenance.
INSERT INTO entity_states (tenant_id, space_id, subject, entity_id, state, previous_state, updated_by_invocation,
                           updated_at)
VALUES (:tenant_id, :space_id, :subject, :entity_id, :state, NULL, :invocation_id, :now)
ON CONFLICT (tenant_id, space_id, subject, entity_id) DO UPDATE
SET previous_state = CASE WHEN entity_states.updated_by_invocation = excluded.updated_by_invocation
                          THEN entity_states.previous_state ELSE entity_states.state END,
    state = excluded.state, updated_by_invocation = excluded.updated_by_invocation, updated_at = excluded.updated_at
WHERE entity_states.state <> excluded.state
RETURNING {{entity_state_columns}};
