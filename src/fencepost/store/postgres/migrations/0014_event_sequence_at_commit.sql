-- fencepost control schema, version 14 (PostgreSQL): an event's sequence is taken when its transaction commits
-- (ADR 0096).
--
-- The sequence was taken by the append itself, which locked the space's host_event_sequences row from that
-- statement to COMMIT: every other appender of the space, on any worker machine, waited for the whole rest of
-- the transaction. Now the append inserts the event without a sequence and a deferred constraint trigger takes
-- the space's next number as the transaction commits, so the row is locked only for the commit itself. Commit
-- order is still sequence order (ADR 0041): the lock is released only after the transaction is visible, and a
-- reader tailing with after= still cannot skip an event. A committed event always has its sequence; `fencepost
-- audit` says so if one ever does not (audit_event_without_sequence).
--
-- The function is bound to this schema (SET search_path FROM CURRENT): a trigger runs in the writing session,
-- whose search_path need not list it.

ALTER TABLE host_events ALTER COLUMN sequence DROP NOT NULL;

CREATE FUNCTION fencepost_event_sequence_at_commit() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    taken INTEGER;
BEGIN
    INSERT INTO host_event_sequences AS s (tenant_id, space_id, last)
    VALUES (NEW.tenant_id, NEW.space_id, 1)
    ON CONFLICT (tenant_id, space_id) DO UPDATE SET last = s.last + 1
    RETURNING s.last INTO taken;
    UPDATE host_events SET sequence = taken WHERE id = NEW.id;
    RETURN NULL;
END;
$$;

CREATE CONSTRAINT TRIGGER host_events_sequence_at_commit
AFTER INSERT ON host_events
DEFERRABLE INITIALLY DEFERRED
FOR EACH ROW WHEN (NEW.sequence IS NULL)
EXECUTE FUNCTION fencepost_event_sequence_at_commit();
