-- tx_status.sql reads, on another connection, whether a transaction
-- committed after its COMMIT's answer was lost.
--   $1 the transaction's id (text, from tx_insert.sql or tx_record.sql)
-- Reply: 'committed', 'aborted', 'in progress', or NULL when too old to tell.
SELECT pg_xact_status($1::xid8)
