-- Invariant checks run by `fencepost audit`. Each audit_* query returns the offending rows as
-- (subject, detail); an empty result means the invariant holds. The schema's constraints already forbid most
-- of these states: the audit re-checks them from the data, so a database edited behind fencepost's back (or
-- with constraints dropped) is caught.

-- name: audit_attempt_receipts
-- Every Attempt has exactly six Receipts at positions 1..6.
SELECT a.id AS subject, 'has ' || count(r.id) || ' receipt(s)' AS detail
FROM rehearsal_attempts a LEFT JOIN rehearsal_receipts r ON r.attempt_id = a.id
GROUP BY a.id
HAVING count(r.id) != 6 OR min(r.position) != 1 OR max(r.position) != 6 OR count(DISTINCT r.position) != 6;

-- name: audit_lease_outside_processing
-- No token, owner or deadline on a command that is not PROCESSING.
SELECT id AS subject, status || ' command holds lease fields' AS detail
FROM commands
WHERE status != 'PROCESSING' AND (lease_token IS NOT NULL OR lease_owner IS NOT NULL OR lease_until IS NOT NULL);

-- name: audit_processing_without_lease
SELECT id AS subject, 'PROCESSING command without a complete lease' AS detail
FROM commands
WHERE status = 'PROCESSING' AND (lease_token IS NULL OR lease_owner IS NULL OR lease_until IS NULL);

-- name: audit_attempt_command_status
-- The Attempt and its command end together.
SELECT a.id AS subject, 'Attempt ' || a.status || ' but command ' || c.status AS detail
FROM rehearsal_attempts a JOIN commands c ON c.id = a.command_id
WHERE (a.status = 'SUCCEEDED' AND c.status != 'DELIVERED')
   OR (a.status = 'FAILED' AND c.status != 'FAILED')
   OR (a.status = 'ABORTED' AND c.status != 'ABORTED')
   OR (a.status IN ('PENDING', 'RUNNING') AND c.status NOT IN ('PENDING', 'PROCESSING'));

-- name: audit_succeeded_receipts
-- A SUCCEEDED Attempt has six SUCCEEDED Receipts with evidence, all from its final delivery.
SELECT a.id AS subject, 'receipt ' || r.position || ' is ' || r.status || ' from delivery '
       || coalesce(r.delivery, 0) || ' (attempt delivery ' || a.delivery || ')' AS detail
FROM rehearsal_attempts a JOIN rehearsal_receipts r ON r.attempt_id = a.id
WHERE a.status = 'SUCCEEDED'
  AND (r.status != 'SUCCEEDED' OR r.evidence IS NULL OR r.delivery IS NULL OR r.delivery != a.delivery);

-- name: audit_open_receipts_of_finished_attempts
SELECT a.id AS subject, 'finished Attempt has ' || r.status || ' receipt ' || r.position AS detail
FROM rehearsal_attempts a JOIN rehearsal_receipts r ON r.attempt_id = a.id
WHERE a.status IN ('SUCCEEDED', 'FAILED', 'ABORTED') AND r.status IN ('PENDING', 'RUNNING');

-- name: audit_receipt_sequence
-- Receipts move only by whole transitions (start: Receipt 1 RUNNING; Receipt k SUCCEEDED together with k+1
-- RUNNING; succeed, fail and abort finish every open Receipt with the Attempt), so the statuses of one
-- Attempt in position order always read P* (PENDING Attempt), S*RP* (RUNNING), S*[FA]A* (FAILED) or S*A*
-- (ABORTED), and the started Receipts of a RUNNING Attempt belong to its current delivery. Any other shape
-- is a half-applied transition. (SUCCEEDED Attempts and finished Attempts with open Receipts have their
-- own checks above.)
SELECT r.id AS subject, 'receipt ' || r.position || ' is ' || r.status || ' out of sequence in '
       || a.status || ' Attempt ' || a.id || ' (delivery ' || a.delivery || ')' AS detail
FROM rehearsal_receipts r JOIN rehearsal_attempts a ON a.id = r.attempt_id
WHERE (a.status = 'PENDING' AND r.status != 'PENDING')
   OR (a.status = 'RUNNING' AND r.status IN ('FAILED', 'ABORTED'))
   OR (a.status = 'RUNNING' AND r.position = 6 AND r.status = 'SUCCEEDED')
   OR (a.status = 'RUNNING' AND r.status = 'PENDING'
       AND (r.position = 1 OR EXISTS (SELECT 1 FROM rehearsal_receipts p
                                      WHERE p.attempt_id = r.attempt_id AND p.position = r.position - 1
                                        AND p.status = 'SUCCEEDED')))
   OR (a.status = 'ABORTED' AND r.status = 'FAILED')
   OR (r.status = 'PENDING' AND (r.delivery IS NOT NULL OR r.evidence IS NOT NULL))
   OR (r.status = 'RUNNING' AND r.evidence IS NOT NULL)
   OR (a.status = 'RUNNING' AND r.status != 'PENDING' AND (r.delivery IS NULL OR r.delivery != a.delivery))
   OR EXISTS (SELECT 1 FROM rehearsal_receipts e
              WHERE e.attempt_id = r.attempt_id AND e.position < r.position
                AND ((r.status IN ('SUCCEEDED', 'RUNNING', 'FAILED') AND e.status != 'SUCCEEDED')
                     OR (e.status IN ('PENDING', 'RUNNING') AND r.status != 'PENDING')
                     OR (e.status IN ('FAILED', 'ABORTED') AND r.status != 'ABORTED')));

-- name: audit_delivery_numbers
-- No Attempt or Receipt claims a delivery its command never had.
SELECT a.id AS subject, 'delivery ' || a.delivery || ' exceeds delivery_count ' || c.delivery_count AS detail
FROM rehearsal_attempts a JOIN commands c ON c.id = a.command_id
WHERE a.delivery > c.delivery_count
UNION ALL
SELECT r.id AS subject, 'receipt delivery ' || r.delivery || ' exceeds delivery_count ' || c.delivery_count
FROM rehearsal_receipts r JOIN rehearsal_attempts a ON a.id = r.attempt_id JOIN commands c ON c.id = a.command_id
WHERE r.delivery > c.delivery_count;

-- name: audit_lease_events_of_unknown_commands
-- Every lease-history row names a command that exists (PostgreSQL keeps no foreign key for it, ADR 0091).
SELECT CAST(e.seq AS TEXT) AS subject, e.event || ' of unknown command ' || e.command_id AS detail
FROM lease_events e
WHERE NOT EXISTS (SELECT 1 FROM commands c WHERE c.id = e.command_id);

-- name: audit_claimable_payload_not_an_object
-- per-dialect
-- A command still to be claimed holds a JSON object (ADR 0094): a claim reads its payload back as one, so any
-- other value (stored before migration 0013, or with its triggers off) would stop every worker that claims it.

-- name: audit_orphan_rehearsal_commands
SELECT c.id AS subject, 'rehearsal command without an Attempt' AS detail
FROM commands c
WHERE c.kind = 'rehearsal.attempt' AND NOT EXISTS (SELECT 1 FROM rehearsal_attempts a WHERE a.command_id = c.id);

-- name: audit_run_without_files
SELECT r.id AS subject, 'Run has no frozen files' AS detail
FROM rehearsal_runs r
WHERE NOT EXISTS (SELECT 1 FROM rehearsal_run_files f WHERE f.run_id = r.id);

-- name: sealed_receipts
-- instants: started_at, finished_at
-- Rows whose evidence the audit re-fingerprints in Python, with the Run content digest the evidence must name.
SELECT r.id, r.attempt_id, r.position, r.scenario, r.status, r.delivery, r.evidence, r.evidence_fingerprint,
       r.started_at, r.finished_at, u.content_digest
FROM rehearsal_receipts r
JOIN rehearsal_attempts a ON a.id = r.attempt_id
JOIN rehearsal_runs u ON u.id = a.run_id
WHERE r.evidence IS NOT NULL ORDER BY r.attempt_id, r.position;

-- name: frozen_files
SELECT run_id, path, sha256, size, content FROM rehearsal_run_files ORDER BY run_id, path;

-- name: schema_checksums
-- The applied migrations as recorded; the audit compares each checksum with the shipped file.
SELECT version, name, checksum FROM fencepost_schema ORDER BY version;

-- ──────────────────────────── the action host (ADR 0022) ────────────────────────────

-- name: audit_invocation_command_status
-- An invocation and its host.invoke command end together: a verdict with the command finished (DELIVERED, or
-- FAILED for a verdict the worker wrote), an open invocation with its command still claimable or held. A
-- parked handoff (running with parked_at, host-spec N2) is the one open invocation whose command has ended:
-- parking finished it DELIVERED in the same unit.
SELECT i.id AS subject, 'invocation ' || i.status || CASE WHEN i.parked_at IS NOT NULL AND i.status = 'running'
       THEN ' and parked' ELSE '' END || ' but command ' || coalesce(c.status, 'missing') AS detail
FROM invocations i LEFT JOIN commands c ON c.id = i.id
WHERE c.id IS NULL
   OR (i.status IN ('succeeded', 'failed', 'reconciliation_required') AND c.status NOT IN ('DELIVERED', 'FAILED'))
   OR (i.status = 'running' AND i.parked_at IS NOT NULL AND c.status != 'DELIVERED')
   OR (i.status IN ('pending', 'running') AND i.parked_at IS NULL AND c.status NOT IN ('PENDING', 'PROCESSING'));

-- name: audit_invocation_handoffs
-- The handoff's instants (host-spec N8, N19; ADR 0034): a succeeded or failed invocation that carries overdue_at
-- without parked_at was settled after a sweep although it never parked (only evidence may follow such a sweep,
-- N20); parked_at, overdue_at or a deadline without a handoff (provider and reference) belong to nothing.
-- A succeeded invocation with a handoff was settled by its completion, so it parked and has one on record (N3);
-- a running one was never swept (the sweep's verdict is reconciliation_required).
SELECT i.id AS subject,
       CASE WHEN i.handoff_reference IS NULL OR i.handoff_provider IS NULL
            THEN 'parked_at, overdue_at or completion_due_at without a handoff'
            WHEN i.status = 'running' THEN 'running invocation carries overdue_at (the sweep settles what it marks)'
            WHEN i.status = 'succeeded' AND (i.parked_at IS NULL OR i.external_completion IS NULL)
                 AND i.overdue_at IS NULL
            THEN 'succeeded invocation with a handoff that did not park or has no completion on record'
            ELSE i.status || ' invocation carries overdue_at without parked_at (settled after a sweep without '
                 || 'having parked)' END AS detail
FROM invocations i
WHERE ((i.handoff_reference IS NULL OR i.handoff_provider IS NULL)
       AND (i.parked_at IS NOT NULL OR i.overdue_at IS NOT NULL OR i.completion_due_at IS NOT NULL))
   OR (i.status IN ('succeeded', 'failed') AND i.overdue_at IS NOT NULL AND i.parked_at IS NULL
       AND NOT EXISTS (SELECT 1 FROM host_resolutions r WHERE r.invocation_id = i.id))
   OR (i.status = 'running' AND i.overdue_at IS NOT NULL)
   OR (i.status = 'succeeded' AND i.handoff_reference IS NOT NULL
       AND (i.parked_at IS NULL OR i.external_completion IS NULL)
       -- An operator's resolution (ADR 0048) may settle a handoff that never completed.
       AND NOT EXISTS (SELECT 1 FROM host_resolutions r WHERE r.invocation_id = i.id));

-- name: audit_invocation_steps
-- A pending invocation has no adapter row; a succeeded one has only succeeded rows (host-spec J3), unless an
-- operator resolved it succeeded (ADR 0048: the ambiguous step's row keeps what the host saw).
SELECT i.id AS subject, i.status || ' invocation has a ' || a.status || ' step ' || a.step_name AS detail
FROM invocations i JOIN adapter_invocations a ON a.invocation_id = i.id
WHERE i.status = 'pending' OR (i.status = 'succeeded' AND a.status != 'succeeded'
                               AND NOT EXISTS (SELECT 1 FROM host_resolutions r WHERE r.invocation_id = i.id));

-- name: audit_invocation_verdict_event
-- A verdict has a verdict event (written in its transaction) and the latest one names the current status; an open
-- invocation has none. A later status change (a sweep, a completion, a contradiction; ADR 0035) writes its own
-- verdict event, so one invocation may hold one per status it has had.
SELECT i.id AS subject, i.status || ' invocation has ' || count(e.id) || ' verdict event(s)' AS detail
FROM invocations i
LEFT JOIN host_events e ON e.subject_type = 'ActionInvocation' AND e.subject_id = i.id
     AND e.type IN ('ActionInvocationSucceeded', 'ActionInvocationFailed', 'ActionInvocationReconciliationRequired')
GROUP BY i.id, i.status
HAVING (i.status IN ('succeeded', 'failed', 'reconciliation_required') AND count(e.id) = 0)
    OR (i.status NOT IN ('succeeded', 'failed', 'reconciliation_required') AND count(e.id) > 0)
UNION ALL
SELECT i.id AS subject, i.status || ' invocation, but its latest verdict event is ' || e.type
       || CASE WHEN e.type = 'InvocationResolved'
               THEN ' of a ' || coalesce(r.outcome, 'missing') || ' resolution' ELSE '' END AS detail
FROM invocations i
JOIN host_events e ON e.subject_type = 'ActionInvocation' AND e.subject_id = i.id
     AND e.type IN ('ActionInvocationSucceeded', 'ActionInvocationFailed', 'ActionInvocationReconciliationRequired',
                    'InvocationResolved')
LEFT JOIN host_resolutions r ON r.invocation_id = i.id
WHERE i.status IN ('succeeded', 'failed', 'reconciliation_required')
  AND e.sequence = (SELECT max(l.sequence) FROM host_events l
                    WHERE l.subject_type = 'ActionInvocation' AND l.subject_id = i.id
                      AND l.type IN ('ActionInvocationSucceeded', 'ActionInvocationFailed',
                                     'ActionInvocationReconciliationRequired', 'InvocationResolved'))
  -- An operator's resolution (ADR 0048) is the latest verdict event of the status it chose.
  AND ((e.type = 'InvocationResolved' AND (r.outcome IS NULL OR r.outcome != i.status))
       OR (e.type != 'InvocationResolved'
           AND e.type != (CASE i.status WHEN 'succeeded' THEN 'ActionInvocationSucceeded'
                                        WHEN 'failed' THEN 'ActionInvocationFailed'
                                        ELSE 'ActionInvocationReconciliationRequired' END)));

-- name: audit_event_without_sequence
-- Every committed event has its sequence (ADR 0096: on PostgreSQL a deferred trigger takes it at COMMIT, so a
-- NULL one means the trigger was disabled or bypassed, and a reader tailing by sequence never sees the event).
SELECT id AS subject, type || ' event of space ' || tenant_id || '/' || space_id || ' has no sequence (its '
       || 'trigger was disabled or bypassed; a reader tailing by sequence never sees it)' AS detail
FROM host_events
WHERE sequence IS NULL;

-- name: audit_event_sequence_counter_behind
-- A space's counter is at least its highest sequence (ADR 0041, 0096): a counter behind the log would hand out
-- a number already taken, and every later append of the space would fail (a break-it trial got there through a
-- session's temporary table of the counter's name, which the trigger's search_path now rules out).
SELECT e.tenant_id || '/' || e.space_id AS subject,
       'event sequence counter ' || CAST(coalesce(max(q.last), 0) AS TEXT) || ' is behind the log''s highest '
       || 'sequence ' || CAST(max(e.sequence) AS TEXT) AS detail
FROM host_events e
LEFT JOIN host_event_sequences q ON q.tenant_id = e.tenant_id AND q.space_id = e.space_id
GROUP BY e.tenant_id, e.space_id
HAVING max(e.sequence) > coalesce(max(q.last), 0);

-- name: audit_invocation_resolution
-- An operator's resolution (ADR 0048; host-spec §1.Y-13) is written with its InvocationResolved event in one
-- transaction, and keeps a copy of the verdict it settled: a resolution without its event, an event without
-- its resolution, or a settled verdict (error, reconciliation) rewritten since is a finding. The verdict event
-- it settled stays in the log too.
SELECT r.invocation_id AS subject, 'resolution ' || r.id || ' has no InvocationResolved event' AS detail
FROM host_resolutions r
WHERE NOT EXISTS (SELECT 1 FROM host_events e WHERE e.subject_type = 'ActionInvocation'
                    AND e.subject_id = r.invocation_id AND e.type = 'InvocationResolved')
UNION ALL
SELECT e.subject_id AS subject, 'InvocationResolved event ' || e.id || ' without a resolution' AS detail
FROM host_events e
WHERE e.subject_type = 'ActionInvocation' AND e.type = 'InvocationResolved'
  AND NOT EXISTS (SELECT 1 FROM host_resolutions r WHERE r.invocation_id = e.subject_id)
UNION ALL
SELECT r.invocation_id AS subject, 'resolution ' || r.id || ' settled a verdict without its '
       || 'ActionInvocationReconciliationRequired event' AS detail
FROM host_resolutions r
WHERE NOT EXISTS (SELECT 1 FROM host_events e WHERE e.subject_type = 'ActionInvocation'
                    AND e.subject_id = r.invocation_id AND e.type = 'ActionInvocationReconciliationRequired')
UNION ALL
SELECT r.invocation_id AS subject, 'the verdict resolution ' || r.id || ' settled was rewritten since (error or '
       || 'reconciliation differ from the copy the resolution kept)' AS detail
FROM host_resolutions r JOIN invocations i ON i.id = r.invocation_id
WHERE NOT ((i.error = r.prior_error OR (i.error IS NULL AND r.prior_error IS NULL))
           AND (i.reconciliation = r.prior_reconciliation
                OR (i.reconciliation IS NULL AND r.prior_reconciliation IS NULL)));

-- name: audit_invocation_evidence_gaps
-- A terminal verdict whose evidence is incomplete (host-spec K8: a verdict-first fallback may commit the verdict
-- and lose a later evidence write; the gap is final, never repaired, and reported here). For each adapter row of
-- a succeeded, failed or reconciliation_required invocation: no row still running; an ambiguous row has its
-- AdapterInvocationAmbiguous event and its governance reconciliation entry (K1); a succeeded row has its
-- AdapterInvocationSucceeded or ExternalOperationAccepted event (L2); an applied_effect verdict that names an
-- adapter invocation (a lost marker, a handoff) has that invocation's governance record.
SELECT i.id AS subject, 'evidence gap: adapter invocation ' || a.id || ' (step ' || a.step_name || ') '
       || CASE WHEN a.status = 'running' THEN 'is still running under a ' || i.status || ' verdict'
               WHEN a.status = 'ambiguous' THEN 'is ambiguous without an AdapterInvocationAmbiguous event'
               ELSE 'succeeded without an AdapterInvocationSucceeded or ExternalOperationAccepted event' END
       AS detail
FROM invocations i JOIN adapter_invocations a ON a.invocation_id = i.id
WHERE i.status IN ('succeeded', 'failed', 'reconciliation_required')
  AND (a.status = 'running'
       OR (a.status = 'ambiguous' AND NOT EXISTS (
               SELECT 1 FROM host_events e WHERE e.subject_type = 'AdapterInvocation' AND e.subject_id = a.id
                 AND e.type = 'AdapterInvocationAmbiguous'))
       OR (a.status = 'succeeded' AND NOT EXISTS (
               SELECT 1 FROM host_events e WHERE e.subject_type = 'AdapterInvocation' AND e.subject_id = a.id
                 AND e.type IN ('AdapterInvocationSucceeded', 'ExternalOperationAccepted'))))
UNION ALL
SELECT i.id AS subject, 'evidence gap: adapter invocation ' || a.id || ' (step ' || a.step_name || ') '
       || 'is ambiguous without a governance reconciliation record' AS detail
FROM invocations i JOIN adapter_invocations a ON a.invocation_id = i.id
WHERE i.status IN ('succeeded', 'failed', 'reconciliation_required') AND a.status = 'ambiguous'
  AND NOT EXISTS (SELECT 1 FROM host_reconciliations r
                  WHERE r.invocation_id = i.id AND r.log = 'governance' AND r.adapter_invocation_id = a.id)
UNION ALL
SELECT i.id AS subject, 'evidence gap: the applied_effect verdict names adapter invocation '
       || {{invocation_reconciliation_adapter}} || ' without a governance reconciliation record' AS detail
FROM invocations i
WHERE (i.status = 'reconciliation_required' OR EXISTS (SELECT 1 FROM host_resolutions rr
                                                        WHERE rr.invocation_id = i.id))
  AND {{invocation_reconciliation_kind}} = 'applied_effect'
  AND {{invocation_reconciliation_adapter}} IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM host_reconciliations r
                  WHERE r.invocation_id = i.id AND r.log = 'governance'
                    AND r.adapter_invocation_id = {{invocation_reconciliation_adapter}});

-- fragment: event_payload_invocation
-- per-dialect
-- The text of the "invocation_id" field of the payload of the event aliased e (NULL when absent).

-- name: audit_entity_states
-- The state binding (ADR 0077; host-spec A17, A19). An invocation bound to an entity has exactly one
-- StateTransitioned fact (about that entity, naming the invocation) when the host recorded the transition: it
-- parked, or it succeeded by the host's own verdict (an operator's resolution writes no fact); every other
-- invocation has none (a failed or reconciliation_required verdict moves nothing). An invocation whose fact
-- exists left its entity with a recorded state, and when it is still the last to have changed that entity, the
-- state is its target (unless a later transition changed it, the entity holds what the fact says).
SELECT b.id AS subject, b.status || ' invocation bound to ' || b.state_subject || ' ' || b.state_entity_id
       || ' has ' || b.facts || ' StateTransitioned fact(s), not ' || b.expected AS detail
FROM (SELECT i.id, i.status, i.state_subject, i.state_entity_id,
             (SELECT count(*) FROM host_events e
              WHERE e.subject_type = i.state_subject AND e.subject_id = i.state_entity_id
                AND e.type = 'StateTransitioned' AND {{event_payload_invocation}} = i.id) AS facts,
             CASE WHEN i.parked_at IS NOT NULL
                       OR (i.status = 'succeeded'
                           AND NOT EXISTS (SELECT 1 FROM host_resolutions r WHERE r.invocation_id = i.id))
                  THEN 1 ELSE 0 END AS expected
      FROM invocations i
      WHERE i.state_subject IS NOT NULL) AS b
WHERE b.facts <> b.expected
UNION ALL
SELECT i.id AS subject, 'the StateTransitioned fact of ' || i.state_subject || ' ' || i.state_entity_id
       || CASE WHEN s.state IS NULL THEN ' left no recorded state'
               ELSE ' left it ' || s.state || ', not its target ' || i.state_target END AS detail
FROM invocations i
JOIN host_events e ON e.subject_type = i.state_subject AND e.subject_id = i.state_entity_id
     AND e.type = 'StateTransitioned' AND {{event_payload_invocation}} = i.id
LEFT JOIN entity_states s ON s.tenant_id = i.tenant_id AND s.space_id = i.space_id
     AND s.subject = i.state_subject AND s.entity_id = i.state_entity_id
WHERE i.state_subject IS NOT NULL
  AND (s.state IS NULL OR (s.updated_by_invocation = i.id AND s.state <> i.state_target));
