-- forget.sql ends the done row jobonce forget showed: the row expires at
-- once, so the key is free, and stays until pruned, so that the next
-- claim's fence follows its fence (as after pgstore's release.sql). A live
-- done row's expiry and fence never change, so a row that still has both
-- is the one shown: a claim or record written since is kept.
--
-- Parameters: $1 key (bytea), $2 expires_at as read (timestamptz),
--   $3 fence as read (bigint, or NULL).
-- Reply: the command tag; 0 rows means the key no longer holds that row.
UPDATE {table}
   SET expires_at = clock_timestamp()
 WHERE key = $1 AND token IS NULL AND expires_at > clock_timestamp()
   AND expires_at = $2::timestamptz AND fence IS NOT DISTINCT FROM $3::bigint
