-- inspect.sql reads a stored key's row for jobonce inspect and release,
-- without a lock or a write. An expired row (its lease or retention over)
-- stays until pgstore's Prune deletes it: it is read too.
--
-- Parameters: $1 key (bytea).
-- Reply: no row when the key has none; else one row:
--   token         the claim's token; NULL in a done row.
--   fingerprint   the payload fingerprint.
--   result        a done row's result, or NULL.
--   fence         the fence of the claim or record that wrote the row, or
--                 NULL (written before fences).
--   expires_at    the end of the lease or of the retention.
--   live          whether expires_at is still to come.
--   remaining_us  the lease or retention left in microseconds; negative
--                 once expired.
--   age_us        the database clock less the fence, in microseconds: how
--                 long a claim has been held; NULL without a fence.
SELECT k.token, k.fingerprint, k.result, k.fence, k.expires_at,
       k.expires_at > c.now,
       (extract(epoch FROM k.expires_at - c.now) * 1000000)::bigint,
       floor(extract(epoch FROM c.now) * 1000000)::bigint - k.fence
  FROM (SELECT clock_timestamp() AS now) AS c
  JOIN {table} AS k ON k.key = $1
