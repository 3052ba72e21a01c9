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
-- The function is bound to the schema it is created in (its own search_path): a trigger runs in the writing
-- session, whose search_path need not find this schema's tables first. Where the event's schema is not the
-- bound one any more (the schema was renamed), the function names the event's own schema instead.

ALTER TABLE host_events ALTER COLUMN sequence DROP NOT NULL;

CREATE FUNCTION fencepost_event_sequence_at_commit() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    taken INTEGER;
BEGIN
    IF TG_TABLE_SCHEMA IS DISTINCT FROM current_schema() THEN
        -- Not bound to the event's schema (renamed since it was bound): name it, at the price of planning here.
        EXECUTE format('INSERT INTO %1$I.host_event_sequences AS s (tenant_id, space_id, last) VALUES ($1, $2, 1) '
                       'ON CONFLICT (tenant_id, space_id) DO UPDATE SET last = s.last + 1 RETURNING s.last',
                       TG_TABLE_SCHEMA)
            INTO taken USING NEW.tenant_id, NEW.space_id;
        EXECUTE format('UPDATE %1$I.host_events SET sequence = $1 WHERE id = $2', TG_TABLE_SCHEMA)
            USING taken, NEW.id;
        RETURN NULL;
    END IF;
    INSERT INTO host_event_sequences AS s (tenant_id, space_id, last)
    VALUES (NEW.tenant_id, NEW.space_id, 1)
    ON CONFLICT (tenant_id, space_id) DO UPDATE SET last = s.last + 1
    RETURNING s.last INTO taken;
    UPDATE host_events SET sequence = taken WHERE id = NEW.id;
    RETURN NULL;
END;
$$;

-- Bound to the schema its tables were just created in: the schema itself, not the search_path that found it
-- ("$user", public can find another schema in another session), and with pg_temp last, so that a session's
-- temporary table of the same name cannot stand in for the sequence table.
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION fencepost_event_sequence_at_commit() SET search_path = %I, pg_temp',
                   current_schema());
END;
$$;

CREATE CONSTRAINT TRIGGER host_events_sequence_at_commit
AFTER INSERT ON host_events
DEFERRABLE INITIALLY DEFERRED
FOR EACH ROW WHEN (NEW.sequence IS NULL)
EXECUTE FUNCTION fencepost_event_sequence_at_commit();
