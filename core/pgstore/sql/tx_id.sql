-- tx_id.sql reads the id of the current transaction before its commit, as
-- text, or NULL when the transaction has written nothing (has no id).
SELECT pg_current_xact_id_if_assigned()::text
