-- list_claims.sql reads, for jobonce list, the live claims among the rows
-- whose lease or retention ends within $2 microseconds, through the expiry
-- index and up to $1 rows, those that end last first: every live claim of
-- a Guard whose Lease is at most $2 is among them, beside the done rows
-- about to expire. It takes no lock.
--
-- Parameters: $1 the most rows read (bigint), $2 the longest lease left a
-- claim can have, in microseconds (bigint).
-- Reply: one row per live claim, or one row of NULLs after the count when
-- there is none:
--   read          how many rows were read (the same in every row).
--   key           the stored key.
--   token         the claim's token.
--   fence         the claim's fence, or NULL (written before fences).
--   remaining_us  the lease left, in microseconds.
--   age_us        the database clock less the fence, in microseconds: how
--                 long the claim has been held; NULL without a fence.
WITH r AS (
    SELECT key, token, fence, expires_at
      FROM {table}
     WHERE expires_at > statement_timestamp()
       AND expires_at <= statement_timestamp() + $2::bigint * interval '1 microsecond'
     ORDER BY expires_at DESC
     LIMIT $1
)
SELECT n.read, r.key, r.token, r.fence,
       (extract(epoch FROM r.expires_at - statement_timestamp()) * 1000000)::bigint,
       floor(extract(epoch FROM statement_timestamp()) * 1000000)::bigint - r.fence
  FROM (SELECT count(*) AS read FROM r) AS n
  LEFT JOIN r ON r.token IS NOT NULL
