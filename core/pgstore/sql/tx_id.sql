-- tx_id.sql reads, in the caller's transaction and before it ends, the
-- transaction's id, for a transaction RecordTx recorded no key in (its
-- record statements return the id themselves), so that a lost or late
-- answer to its end can be looked up (tx_status.sql).
-- No parameters.
-- Reply: the transaction's id as text, or NULL when it has none yet: it
-- has written nothing, so there is nothing to look up.
SELECT pg_current_xact_id_if_assigned()::text
