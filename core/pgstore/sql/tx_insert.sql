-- tx_insert.sql is the first attempt of a transactional record: it records a
-- key that has no row as done in the caller's transaction, in one statement
-- that touches the table once (tx_record.sql also tries to take over an
-- expired row first, which a fresh key does not need). A key that has a row,
-- live or expired, is left as it is, neither changed nor locked: tx_state.sql
-- reads it, and RecordTx runs tx_record.sql when it has expired. When
-- another transaction has inserted the key, or is taking over its row, and
-- has not committed yet, the insert waits for it (at most lock_timeout): a
-- commit makes this a conflict, a rollback of an insert lets the insert
-- through, and a rolled-back takeover leaves the expired row for
-- tx_record.sql.
--
-- Before anything can wait, it saves the transaction's lock_timeout in the
-- custom setting jobonce.lock_timeout and sets lock_timeout to $4, both for
-- the current transaction only (as tx_lock_timeout.sql does: the innermost
-- subquery, fenced by OFFSET 0, runs first, so the value saved is the
-- caller's; the outer one, also fenced, runs before the row reaches the
-- insert). tx_state.sql, the next statement, restores it.
--
-- The record's fence is the database clock in microseconds since the Unix
-- epoch (there is no earlier row whose fence it must exceed).
--
-- Parameters: $1 key (bytea), $2 fingerprint (bytea),
--   $3 retention in microseconds (bigint), $4 lock_timeout (text, such as
--   '100ms').
-- Reply: one row (fence, the transaction's id as text) when the key was
-- recorded, none when it has a row. The id lets a commit whose answer is
-- lost be looked up (tx_status.sql).
INSERT INTO {table} (key, token, fingerprint, result, expires_at, fence)
SELECT $1, NULL, $2, NULL, clock_timestamp() + $3::bigint * interval '1 microsecond',
       floor(extract(epoch FROM clock_timestamp()) * 1000000)::bigint
  FROM (SELECT set_config('lock_timeout', $4::text, true)
          FROM (SELECT set_config('jobonce.lock_timeout', current_setting('lock_timeout'), true) OFFSET 0) AS saved
        OFFSET 0) AS settings
ON CONFLICT (key) DO NOTHING
RETURNING fence, pg_current_xact_id()::text
