-- extend.sql renews the lease of a live claim held by a token.
--
-- Parameters: $1 key (bytea), $2 token (uuid), $3 lease in microseconds (bigint).
-- Reply: the command tag; 0 rows means the token no longer holds the key.
UPDATE {table}
   SET expires_at = clock_timestamp() + $3::bigint * interval '1 microsecond'
 WHERE key = $1 AND token = $2 AND expires_at > clock_timestamp()
