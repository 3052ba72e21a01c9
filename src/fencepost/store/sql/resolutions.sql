-- Operator resolutions and the operator's reads of the action host (migration 0007; ADRs 0048, 0049;
-- host-spec §1.Y-13, §2.7).

-- fragment: resolution_columns
r.id, r.tenant_id, r.space_id, r.invocation_id, r.outcome, r.operator, r.note, r.evidence, r.prior_status,
r.prior_error, r.prior_reconciliation, r.request_digest, r.created_at

-- name: insert_resolution
-- The resolution row, only while the invocation is reconciliation_required in the row's scope, with a copy of
-- the verdict it settles read from the row itself; an invocation already resolved inserts nothing.
INSERT INTO host_resolutions (id, tenant_id, space_id, invocation_id, outcome, operator, note, evidence,
                              prior_status, prior_error, prior_reconciliation, request_digest, created_at)
SELECT :id, i.tenant_id, i.space_id, i.id, :outcome, :operator, :note, :evidence, i.status, i.error,
       i.reconciliation, :request_digest, :now
FROM invocations AS i
WHERE i.id = :invocation_id AND i.tenant_id = :tenant_id AND i.space_id = :space_id
  AND i.status = 'reconciliation_required'
ON CONFLICT (invocation_id) DO NOTHING
RETURNING id;

-- name: resolve_invocation_status
-- The status move of a resolution (host-spec §1.Y-1 (b)): only the status and updated_at change; error,
-- result and reconciliation stay as the settled verdict wrote them.
UPDATE invocations SET status = :outcome, updated_at = :now
WHERE id = :invocation_id AND status = 'reconciliation_required';

-- name: get_resolution
-- instants: created_at
SELECT {{resolution_columns}}
FROM host_resolutions AS r WHERE r.invocation_id = :invocation_id;

-- name: page_invocations
-- instants: created_at, updated_at, lease_until, completion_due_at, parked_at, overdue_at
-- Newest first, after the cursor row (keyset: created_at, then id, both descending); each filter applies only
-- when given. A cursor naming no invocation yields no rows.
SELECT {{invocation_columns}}
FROM invocations AS i LEFT JOIN commands AS c ON c.id = i.id
WHERE (CAST(:tenant_id AS TEXT) IS NULL OR i.tenant_id = :tenant_id)
  AND (CAST(:space_id AS TEXT) IS NULL OR i.space_id = :space_id)
  AND (CAST(:status AS TEXT) IS NULL OR i.status = :status)
  AND (CAST(:action_id AS TEXT) IS NULL OR i.action_id = :action_id)
  AND (CAST(:after_id AS TEXT) IS NULL
       OR EXISTS (SELECT 1 FROM invocations AS b WHERE b.id = :after_id
                  AND (i.created_at < b.created_at OR (i.created_at = b.created_at AND i.id < b.id))))
ORDER BY i.created_at DESC, i.id DESC
LIMIT :limit;

-- name: reconciliation_queue
-- instants: created_at, updated_at, lease_until, completion_due_at, parked_at, overdue_at
-- The invocations awaiting an operator, oldest verdict first (updated_at is the instant of the verdict: a
-- reconciliation_required invocation is written again only by its resolution).
SELECT {{invocation_columns}}
FROM invocations AS i LEFT JOIN commands AS c ON c.id = i.id
WHERE i.status = 'reconciliation_required'
  AND (CAST(:tenant_id AS TEXT) IS NULL OR i.tenant_id = :tenant_id)
  AND (CAST(:space_id AS TEXT) IS NULL OR i.space_id = :space_id)
ORDER BY i.updated_at, i.id
LIMIT :limit;
