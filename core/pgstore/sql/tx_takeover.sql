-- tx_takeover.sql deletes the key's row when it has expired (a crashed
-- claim or an old done row), so the insert that follows can record the key.
-- A row that is live is left alone and not locked.
--
-- Parameters: $1 key (bytea).
DELETE FROM {table} WHERE key = $1 AND expires_at <= clock_timestamp()
