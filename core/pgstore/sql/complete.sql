-- complete.sql turns a live claim held by a token into a done row.
--
-- Parameters: $1 key (bytea), $2 token (uuid), $3 fingerprint (bytea),
--   $4 result (bytea or NULL), $5 retention in microseconds (bigint).
-- Reply: the command tag; 0 rows means the token no longer holds the key.
UPDATE {table}
   SET token = NULL,
       fingerprint = $3,
       result = $4,
       expires_at = clock_timestamp() + $5::bigint * interval '1 microsecond'
 WHERE key = $1 AND token = $2 AND expires_at > clock_timestamp()
