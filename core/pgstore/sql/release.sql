-- release.sql ends a live claim held by a token: its row expires at once, so
-- the key is free, and stays until pruned, so that the next claim's fence
-- follows this claim's.
--
-- Parameters: $1 key (bytea), $2 token (uuid).
-- Reply: the command tag; 0 rows means the token no longer holds the key.
UPDATE {table}
   SET expires_at = clock_timestamp()
 WHERE key = $1 AND token = $2 AND expires_at > clock_timestamp()
