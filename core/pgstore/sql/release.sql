-- release.sql deletes a live claim held by a token.
--
-- Parameters: $1 key (bytea), $2 token (uuid).
-- Reply: the command tag; 0 rows means the token no longer holds the key.
DELETE FROM {table}
 WHERE key = $1 AND token = $2 AND expires_at > clock_timestamp()
