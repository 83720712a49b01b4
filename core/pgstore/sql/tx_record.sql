-- tx_record.sql records a key as done in the caller's transaction, in one
-- statement, on a record's later attempts: when tx_insert.sql (the first)
-- found a row that has expired, or one that vanished before tx_state.sql
-- read it. A row that has expired (a crashed claim, an old done row) is
-- taken over; a live row is neither changed nor locked. When the key is
-- absent but another transaction has recorded it and not committed yet, the
-- insert waits for it (at most lock_timeout): a commit makes this a
-- conflict, a rollback lets the insert through.
--
-- The record's fence is the database clock in microseconds since the Unix
-- epoch, or one more than the fence of the expired row it takes over,
-- whichever is larger.
--
-- Parameters: $1 key (bytea), $2 fingerprint (bytea),
--   $3 retention in microseconds (bigint).
-- Reply: one row (fence, the transaction's id as text) when the key was
-- recorded, none when it exists. The id lets a commit whose answer is lost
-- be looked up (tx_status.sql).
WITH taken AS (
    UPDATE {table} AS t
       SET token = NULL,
           fingerprint = $2,
           result = NULL,
           expires_at = clock_timestamp() + $3::bigint * interval '1 microsecond',
           fence = greatest(floor(extract(epoch FROM clock_timestamp()) * 1000000)::bigint,
                            coalesce(t.fence, 0) + 1)
     WHERE key = $1 AND expires_at <= clock_timestamp()
    RETURNING fence
), inserted AS (
    INSERT INTO {table} (key, token, fingerprint, result, expires_at, fence)
    SELECT $1, NULL, $2, NULL, clock_timestamp() + $3::bigint * interval '1 microsecond',
           floor(extract(epoch FROM clock_timestamp()) * 1000000)::bigint
     WHERE NOT EXISTS (SELECT FROM taken)
    ON CONFLICT (key) DO NOTHING
    RETURNING fence
)
SELECT fence, pg_current_xact_id()::text FROM taken
UNION ALL
SELECT fence, pg_current_xact_id()::text FROM inserted
