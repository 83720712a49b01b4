-- tx_end.sql ends, from another connection, the backend of a transaction
-- whose COMMIT never reached it (the client gave up on a connection that
-- went silent): such a backend stays idle in transaction, the key's row
-- locked, until the server notices the connection is dead. A backend that
-- is running a statement (its COMMIT, say) is left to finish, as far as
-- the role can see: pg_stat_activity hides another role's state from a role
-- without pg_read_all_stats, and such a backend is ended whatever it runs
-- (a COMMIT it was running then rolls back, and the read-back says so).
-- Terminating needs the pool's role to be the backend's, a superuser, or a
-- member of pg_signal_backend; otherwise it fails with SQLSTATE 42501.
--   $1 the transaction's id (text, from tx_insert.sql or tx_record.sql)
--   $2 how long to wait for the backend to exit, in milliseconds (bigint)
-- Reply: one row (pid, exited) per backend of the transaction that was
-- idle in transaction (at most one), none when there is no such backend.
SELECT pid, pg_terminate_backend(pid, $2::bigint)
  FROM pg_stat_activity
 WHERE backend_xid = ((($1::text)::numeric % 4294967296)::bigint)::text::xid
   AND (state LIKE 'idle in transaction%' OR state IS NULL)
