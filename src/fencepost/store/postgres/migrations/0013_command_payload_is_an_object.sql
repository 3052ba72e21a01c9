-- fencepost control schema, version 13 (PostgreSQL): a command's payload is a JSON object (ADR 0094).
--
-- Every claim reads the payload back as an object. A command written with another JSON value (a list, a
-- number; possible only by writing the table directly, the outbox port refuses it) made every worker that
-- claimed it fail and exit, and its batch ran again on the next worker. The payload trigger of version 12 now
-- refuses such a value as it refuses text that is not JSON: the same check violation, the same constraint name.
-- Rows stored before this version are not rewritten; `fencepost audit` lists the ones still to be claimed.

CREATE OR REPLACE FUNCTION fencepost_commands_payload_is_json() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- Casts itself rather than calling fencepost_is_json: PL/pgSQL resolves a function name through the
    -- writing session's search_path, which need not list this schema (the CHECK was bound when created).
    IF pg_catalog.json_typeof(NEW.payload::pg_catalog.json) <> 'object' THEN
        RAISE EXCEPTION 'new row for relation "commands" violates check constraint "commands_payload_check"'
            USING ERRCODE = 'check_violation', TABLE = 'commands', COLUMN = 'payload',
                  CONSTRAINT = 'commands_payload_check', DETAIL = 'The payload is not a JSON object.';
    END IF;
    RETURN NEW;
EXCEPTION WHEN data_exception THEN
    RAISE EXCEPTION 'new row for relation "commands" violates check constraint "commands_payload_check"'
        USING ERRCODE = 'check_violation', TABLE = 'commands', COLUMN = 'payload',
              CONSTRAINT = 'commands_payload_check';
END;
$$;
