-- prune.sql deletes up to $1 (integer) expired rows.
--
-- Rows locked by someone else are skipped, and the DELETE checks expiry again
-- on the newest version of each row it removes, so a claim that took over an
-- expired row meanwhile is never deleted. Rows of transactions not yet
-- committed are invisible here and untouched.
-- Reply: the command tag with the number of rows deleted.
DELETE FROM {table}
 WHERE key IN (
        SELECT key FROM {table}
         WHERE expires_at <= clock_timestamp()
         LIMIT $1
           FOR UPDATE SKIP LOCKED)
   AND expires_at <= clock_timestamp()
