-- release.sql ends a live claim held by a token: its row expires at once, so
-- the key is free, and stays until pruned, so that the next claim's fence
-- follows this claim's. A claim that await.sql marked awaited notifies $3
-- with the key in hex (see complete.sql).
--
-- Parameters: $1 key (bytea), $2 token (uuid), $3 the store's channel (text).
-- Reply: the command tag; 0 rows means the token no longer holds the key.
UPDATE {table}
   SET expires_at = clock_timestamp(),
       result = CASE WHEN result IS NULL THEN NULL
                     ELSE (SELECT NULL::bytea FROM (SELECT pg_notify($3::text, encode(key, 'hex'))) AS notified) END
 WHERE key = $1 AND token = $2 AND expires_at > clock_timestamp()
