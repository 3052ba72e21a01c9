-- fencepost control schema, version 12 (PostgreSQL): the outbox's hot path checks what its statements can
-- change, and no more (ADR 0091).
--
-- The payload's JSON check moves from a CHECK, which PostgreSQL evaluates on every UPDATE of a command row
-- (each claim, heartbeat and completion; a PL/pgSQL call with an exception block, so a subtransaction, per
-- row), to a trigger on INSERT and on UPDATE OF payload: the only writes that can change the payload. It
-- raises the same check violation under the same constraint name.
--
-- lease_events.command_id stops being a foreign key. Every history row is written by the statement (or the
-- transaction) that changed its command under the lease it records, so the command exists by construction;
-- commands are never deleted. The per-row key check cost a quarter of a claim's or a completion's server
-- time. `fencepost audit` checks the same rule (audit_lease_events_of_unknown_commands).

ALTER TABLE commands DROP CONSTRAINT commands_payload_check;

CREATE FUNCTION fencepost_commands_payload_is_json() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- Casts itself rather than calling fencepost_is_json: PL/pgSQL resolves a function name through the
    -- writing session's search_path, which need not list this schema (the CHECK was bound when created).
    PERFORM NEW.payload::pg_catalog.json;
    RETURN NEW;
EXCEPTION WHEN data_exception THEN
    RAISE EXCEPTION 'new row for relation "commands" violates check constraint "commands_payload_check"'
        USING ERRCODE = 'check_violation', TABLE = 'commands', COLUMN = 'payload',
              CONSTRAINT = 'commands_payload_check';
END;
$$;

CREATE TRIGGER commands_payload_is_json BEFORE INSERT OR UPDATE OF payload ON commands
    FOR EACH ROW EXECUTE FUNCTION fencepost_commands_payload_is_json();

ALTER TABLE lease_events DROP CONSTRAINT lease_events_command_id_fkey;
