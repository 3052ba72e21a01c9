-- fencepost control schema, version 13 (SQLite): a command's payload is a JSON object (ADR 0094).
--
-- Every claim reads the payload back as an object. A command written with another JSON value (a list, a
-- number; possible only by writing the table directly, the outbox port refuses it) made every worker that
-- claimed it fail and exit, and its batch ran again on the next worker. SQLite cannot add a CHECK to an
-- existing table without rebuilding it, so two triggers refuse such a value on INSERT and on UPDATE OF
-- payload; text that is not JSON at all is left to the column's json_valid CHECK, as before. Rows stored
-- before this version are not rewritten; `fencepost audit` lists the ones still to be claimed.

CREATE TRIGGER commands_payload_is_an_object_on_insert
BEFORE INSERT ON commands
WHEN json_valid(NEW.payload) AND json_type(NEW.payload) <> 'object'
BEGIN
    SELECT RAISE(ABORT, 'CHECK constraint failed: commands_payload_is_an_object');
END;

CREATE TRIGGER commands_payload_is_an_object_on_update
BEFORE UPDATE OF payload ON commands
WHEN json_valid(NEW.payload) AND json_type(NEW.payload) <> 'object'
BEGIN
    SELECT RAISE(ABORT, 'CHECK constraint failed: commands_payload_is_an_object');
END;
