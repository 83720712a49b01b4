-- complete.sql turns a live claim held by a token into a done row, or
-- finds the done row that claim wrote (the same request sent again).
--
-- Parameters: $1 key (bytea), $2 token (uuid), $3 fingerprint (bytea),
--   $4 result (bytea or NULL), $5 retention in microseconds (bigint),
--   $6 the claim's fence (bigint; 0 when unknown), $7 the store's channel
--   (text).
-- A claim that await.sql marked awaited (an empty result on a running row)
-- notifies $7 with the key in hex as it becomes done; the notification is
-- sent when the transaction commits. A claim nobody awaited sends none, so
-- its commit does not take the lock that serialises notifying commits.
-- A done row keeps the fence of the claim that wrote it (successive claims
-- of a key get increasing fences), so a live done row whose fence is $6 is
-- this claim's own: it is left as it is and counted. A done row of another
-- claim, or of one whose fence is unknown, is not.
-- Reply: the command tag; 0 rows means the token no longer holds the key
-- and did not write its done row.
UPDATE {table}
   SET token = NULL,
       fingerprint = CASE WHEN token IS NULL THEN fingerprint ELSE $3 END,
       result = CASE WHEN token IS NULL THEN result
                     WHEN result IS NULL THEN $4
                     ELSE (SELECT $4::bytea FROM (SELECT pg_notify($7::text, encode(key, 'hex'))) AS notified) END,
       expires_at = CASE WHEN token IS NULL THEN expires_at
                         ELSE clock_timestamp() + $5::bigint * interval '1 microsecond' END
 WHERE key = $1 AND expires_at > clock_timestamp()
   AND (token = $2 OR (token IS NULL AND $6::bigint <> 0 AND fence = $6::bigint))
