-- fencepost control schema, version 6: external completion handoffs (issue 14; host-spec N1, N2, N12, N18,
-- N30; ADR 0034). A step answered Accepted(external_reference): the handoff's identity, its deadline, the
-- parking and sweep instants, and the first recorded completion live on the invocation row.
--
-- Plain ADD COLUMN, no rebuild (ADR 0017 is not needed): every new column is nullable and every existing row
-- has no handoff, so each CHECK holds for every row at once. SQLite accepts a column CHECK that names other
-- columns; each cross-column CHECK sits on a column added after the columns it names.

ALTER TABLE invocations ADD COLUMN handoff_provider TEXT CHECK (handoff_provider IS NULL OR length(handoff_provider) BETWEEN 1 AND 100);
ALTER TABLE invocations ADD COLUMN handoff_reference TEXT CHECK (handoff_reference IS NULL OR length(handoff_reference) BETWEEN 1 AND 500) CONSTRAINT invocations_handoff_pair CHECK ((handoff_provider IS NULL) = (handoff_reference IS NULL));
ALTER TABLE invocations ADD COLUMN completion_due_at TEXT CONSTRAINT invocations_due_needs_handoff CHECK (completion_due_at IS NULL OR handoff_reference IS NOT NULL);
ALTER TABLE invocations ADD COLUMN parked_at TEXT CONSTRAINT invocations_parked_needs_handoff CHECK (parked_at IS NULL OR handoff_reference IS NOT NULL);
ALTER TABLE invocations ADD COLUMN overdue_at TEXT CONSTRAINT invocations_overdue_needs_handoff CHECK (overdue_at IS NULL OR handoff_reference IS NOT NULL);
ALTER TABLE invocations ADD COLUMN external_completion TEXT CHECK (external_completion IS NULL OR (json_valid(external_completion) AND json_type(external_completion) = 'object'));

-- A callback is matched by (provider, external reference) only (N30): an index over the rows with a handoff.
CREATE INDEX invocations_by_handoff ON invocations (handoff_provider, handoff_reference)
WHERE handoff_reference IS NOT NULL;

-- The deadline sweep (N12) scans running invocations by due time; the rest of the table has no deadline.
CREATE INDEX invocations_handoffs_due ON invocations (completion_due_at)
WHERE status = 'running' AND completion_due_at IS NOT NULL;
