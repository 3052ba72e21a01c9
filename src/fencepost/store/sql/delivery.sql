-- Delivery targets and delivery starts (migration 0009, ADRs 0055, 0056). Common to every dialect. Instants
-- arrive as parameters read once per transaction from the store's clock (:now).

-- name: insert_target
-- instants: added_at, removed_at
-- A new live target; nothing when a live target has the name already (the caller reads that one).
INSERT INTO delivery_targets (id, name, url, labels, added_at, removed_at)
VALUES (:id, :name, :url, :labels, :now, NULL)
ON CONFLICT (name) WHERE removed_at IS NULL DO NOTHING
RETURNING id, name, url, labels, added_at, removed_at;

-- name: get_live_target
-- instants: added_at, removed_at
SELECT id, name, url, labels, added_at, removed_at FROM delivery_targets
WHERE name = :name AND removed_at IS NULL;

-- name: get_target
-- instants: added_at, removed_at
-- By id: a removed target is still found, so a past delivery names it.
SELECT id, name, url, labels, added_at, removed_at FROM delivery_targets WHERE id = :id;

-- name: list_live_targets
-- instants: added_at, removed_at
SELECT id, name, url, labels, added_at, removed_at FROM delivery_targets
WHERE removed_at IS NULL ORDER BY name;

-- name: list_targets
-- instants: added_at, removed_at
-- Every target, removed ones too (the operator page shows them on request): by name, a live one before the
-- removed ones of its name, those newest removed first.
SELECT id, name, url, labels, added_at, removed_at FROM delivery_targets
ORDER BY name, removed_at IS NOT NULL, removed_at DESC, id;

-- name: remove_target
-- instants: added_at, removed_at
UPDATE delivery_targets SET removed_at = :now WHERE name = :name AND removed_at IS NULL
RETURNING id, name, url, labels, added_at, removed_at;

-- name: insert_delivery_start
-- The start barrier's row (ADR 0056): first write wins, so a recovered run re-passing the barrier changes nothing.
INSERT INTO delivery_starts (invocation_id, package_name, version, publication_id, installation_id, lock_digest,
                             target_id, started_at)
VALUES (:invocation_id, :package_name, :version, :publication_id, :installation_id, :lock_digest, :target_id, :now)
ON CONFLICT (invocation_id) DO NOTHING;

-- name: get_delivery_start
-- instants: started_at
SELECT invocation_id, package_name, version, publication_id, installation_id, lock_digest, target_id, started_at
FROM delivery_starts WHERE invocation_id = :invocation_id;

-- name: list_delivery_starts
-- instants: started_at
SELECT invocation_id, package_name, version, publication_id, installation_id, lock_digest, target_id, started_at
FROM delivery_starts WHERE package_name = :package_name ORDER BY started_at, invocation_id;
