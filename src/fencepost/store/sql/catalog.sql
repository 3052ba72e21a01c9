-- The package catalog: publications, the per-package head, installations, dispositions and quarantines.
-- Every guard change locks the package first (lock_package), as admission does (ADR-0224).

-- name: lock_package
-- per-dialect
-- Serializes guard changes and admissions of one package. SQLite's BEGIN IMMEDIATE already holds the
-- database write reservation, so this is a no-op here.

-- name: insert_publication
-- instants: published_at, withdrawn_at
INSERT INTO package_publications (id, package_name, version, content_digest, definition, definition_digest,
                                  status, gate, gate_run_id, previous_publication_id, published_at)
VALUES (:id, :package_name, :version, :content_digest, :definition, :definition_digest, 'active', :gate,
        :gate_run_id, :previous_publication_id, :now)
RETURNING id, package_name, version, content_digest, definition, definition_digest, status, gate, gate_run_id,
          previous_publication_id, published_at, withdrawn_at;

-- name: get_publication
-- instants: published_at, withdrawn_at
SELECT id, package_name, version, content_digest, definition, definition_digest, status, gate, gate_run_id,
       previous_publication_id, published_at, withdrawn_at
FROM package_publications WHERE id = :id;

-- name: get_publication_by_version
-- instants: published_at, withdrawn_at
SELECT id, package_name, version, content_digest, definition, definition_digest, status, gate, gate_run_id,
       previous_publication_id, published_at, withdrawn_at
FROM package_publications WHERE package_name = :package_name AND version = :version;

-- name: list_publications
-- instants: published_at, withdrawn_at
SELECT id, package_name, version, content_digest, definition, definition_digest, status, gate, gate_run_id,
       previous_publication_id, published_at, withdrawn_at
FROM package_publications WHERE package_name = :package_name ORDER BY published_at, id;

-- name: all_publications
-- instants: published_at, withdrawn_at
-- Every publication (the audit re-verifies each definition digest).
SELECT id, package_name, version, content_digest, definition, definition_digest, status, gate, gate_run_id,
       previous_publication_id, published_at, withdrawn_at
FROM package_publications ORDER BY published_at, id;

-- name: all_installations
-- instants: installed_at, updated_at
SELECT id, package_name, publication_id, lock_digest, status, generation, installed_at, updated_at
FROM package_installations ORDER BY package_name;

-- name: withdraw_publication
-- instants: published_at, withdrawn_at
UPDATE package_publications SET status = 'withdrawn', withdrawn_at = :now WHERE id = :id AND status = 'active'
RETURNING id, package_name, version, content_digest, definition, definition_digest, status, gate, gate_run_id,
          previous_publication_id, published_at, withdrawn_at;

-- name: get_head
-- instants: updated_at
SELECT package_name, publication_id, revision, updated_at FROM package_heads WHERE package_name = :package_name;

-- name: insert_head
INSERT INTO package_heads (package_name, publication_id, revision, updated_at)
VALUES (:package_name, :publication_id, 1, :now);

-- name: move_head
-- Compare-and-set: moves only from the revision the caller saw.
UPDATE package_heads SET publication_id = :publication_id, revision = revision + 1, updated_at = :now
WHERE package_name = :package_name AND revision = :expected_revision;

-- name: get_installation
-- instants: installed_at, updated_at
SELECT id, package_name, publication_id, lock_digest, status, generation, installed_at, updated_at
FROM package_installations WHERE package_name = :package_name;

-- name: insert_installation
-- instants: installed_at, updated_at
INSERT INTO package_installations (id, package_name, publication_id, lock_digest, status, generation,
                                   installed_at, updated_at)
VALUES (:id, :package_name, :publication_id, :lock_digest, 'active', 1, :now, :now)
RETURNING id, package_name, publication_id, lock_digest, status, generation, installed_at, updated_at;

-- name: update_installation
-- instants: installed_at, updated_at
-- Compare-and-set on generation: activate another publication (and so another lock).
UPDATE package_installations
SET publication_id = :publication_id, lock_digest = :lock_digest, status = 'active', generation = generation + 1,
    updated_at = :now
WHERE id = :id AND generation = :expected_generation
RETURNING id, package_name, publication_id, lock_digest, status, generation, installed_at, updated_at;

-- name: get_disposition
-- instants: updated_at
SELECT installation_id, disposition, reason, updated_at FROM installation_dispositions
WHERE installation_id = :installation_id;

-- name: set_disposition
-- instants: updated_at
INSERT INTO installation_dispositions (installation_id, disposition, reason, updated_at)
VALUES (:installation_id, :disposition, :reason, :now)
ON CONFLICT (installation_id) DO UPDATE
SET disposition = excluded.disposition, reason = excluded.reason, updated_at = excluded.updated_at
RETURNING installation_id, disposition, reason, updated_at;

-- name: open_quarantine
-- instants: quarantined_at
SELECT id, installation_id, lock_digest, reason, quarantined_at FROM installation_quarantines
WHERE installation_id = :installation_id AND lock_digest = :lock_digest AND released_at IS NULL;

-- name: insert_quarantine
-- instants: quarantined_at
INSERT INTO installation_quarantines (id, installation_id, lock_digest, reason, quarantined_at)
VALUES (:id, :installation_id, :lock_digest, :reason, :now)
RETURNING id, installation_id, lock_digest, reason, quarantined_at;

-- name: release_quarantine
UPDATE installation_quarantines SET released_at = :now, release_reason = :reason
WHERE installation_id = :installation_id AND lock_digest = :lock_digest AND released_at IS NULL;
