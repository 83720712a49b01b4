-- await.sql marks a key held by another token's live claim as awaited, so
-- that the complete or release that ends the claim notifies the store's
-- channel (complete.sql, release.sql). A running row's result is NULL
-- otherwise (claim.sql writes none, and completes and takeovers replace
-- it): an empty result marks it awaited, so the table needs no column of
-- its own and workers of an earlier release read the row as before. It
-- runs before claim.sql in one READ COMMITTED transaction, so the claim
-- reads the row as marked, or claims a key that had no live claim. Before
-- it can wait for the row's lock (a complete in flight, a transactional
-- record not yet committed), it sets lock_timeout for the transaction.
--
-- Parameters: $1 key (bytea), $2 the caller's token (uuid),
--   $3 lock_timeout (text, such as '100ms').
-- Reply: the command tag.
UPDATE {table}
   SET result = ''::bytea
 WHERE key = $1 AND token IS NOT NULL AND token <> $2 AND result IS NULL
   AND expires_at > clock_timestamp()
   AND (SELECT set_config('lock_timeout', $3::text, true)) IS NOT NULL
