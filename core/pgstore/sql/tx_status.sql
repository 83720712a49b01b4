-- tx_status.sql reads, on another connection, whether a transaction
-- committed after its COMMIT's answer was lost.
--   $1 the transaction's id (text, from tx_insert.sql or tx_record.sql)
-- Reply: 'committed', 'aborted', 'in progress', or NULL when too old to tell.
-- A transaction whose commit record is written reads 'committed' even
-- while its backend still waits for a synchronous standby's confirmation.
SELECT pg_xact_status($1::xid8)
