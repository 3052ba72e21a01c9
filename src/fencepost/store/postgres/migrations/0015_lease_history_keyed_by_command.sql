-- fencepost control schema, version 15 (PostgreSQL): the lease history is keyed by its command (ADR 0097).
--
-- Every read of lease_events names one command and orders by seq; nothing looks a row up by seq alone. The
-- table had two B-trees, the primary key on seq and lease_events_by_command on (command_id, seq), and every
-- claim, completion and heartbeat wrote an entry into both for each history row. The primary key becomes
-- (command_id, seq): the same rows, the same order per command, one index entry per row. seq stays an identity
-- column and stays unique by construction.
--
-- Rebuilding the key locks the table for as long as the index takes to build (seconds per ten million rows): run
-- it with the workers, `fencepost serve` and any open session on the database stopped.

ALTER TABLE lease_events DROP CONSTRAINT lease_events_pkey;
DROP INDEX lease_events_by_command;
ALTER TABLE lease_events ADD CONSTRAINT lease_events_pkey PRIMARY KEY (command_id, seq);
