-- fencepost control schema, version 16 (PostgreSQL): the JSON check functions keep a query out of parallel mode.
--
-- Each of these PL/pgSQL functions catches a parse error with an EXCEPTION block, and entering such a block
-- starts a subtransaction, which a parallel worker cannot do. They were marked PARALLEL SAFE, so once a table
-- was large enough for the planner to scan it in parallel (a few million commands), a query calling one of
-- them, among them `fencepost audit`'s, failed with "cannot start subtransactions during a parallel
-- operation". PARALLEL UNSAFE lets the rest of such a query run in parallel and calls them in the leader.

ALTER FUNCTION fencepost_is_json(text) PARALLEL UNSAFE;
ALTER FUNCTION fencepost_json_field(text, text[]) PARALLEL UNSAFE;
ALTER FUNCTION fencepost_json_array_length(text, text[]) PARALLEL UNSAFE;
ALTER FUNCTION fencepost_is_json_object(text) PARALLEL UNSAFE;
