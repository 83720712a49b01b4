-- tx_record.sql records a key as done in the caller's transaction. When
-- another transaction has recorded the key and not committed yet, it waits
-- for it (at most lock_timeout): a commit makes this a conflict, a rollback
-- lets the insert through. A committed row is neither changed nor locked.
--
-- Parameters: $1 key (bytea), $2 fingerprint (bytea),
--   $3 retention in microseconds (bigint).
-- Reply: one row when the key was recorded, none when it exists.
INSERT INTO {table} (key, token, fingerprint, result, expires_at)
VALUES ($1, NULL, $2, NULL, clock_timestamp() + $3::bigint * interval '1 microsecond')
ON CONFLICT (key) DO NOTHING
RETURNING true
