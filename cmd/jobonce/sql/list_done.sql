-- list_done.sql reads, for jobonce list -done, the done rows among the live
-- rows with the most retention left, through the expiry index and up to $1
-- rows. It takes no lock.
--
-- Parameters: $1 the most rows read (bigint).
-- Reply: one row per done row, or one row of NULLs after the count when
-- there is none:
--   read          how many rows were read (the same in every row).
--   key           the stored key.
--   remaining_us  the retention left, in microseconds.
WITH r AS (
    SELECT key, token, expires_at
      FROM {table}
     WHERE expires_at > statement_timestamp()
     ORDER BY expires_at DESC
     LIMIT $1
)
SELECT n.read, r.key,
       (extract(epoch FROM r.expires_at - statement_timestamp()) * 1000000)::bigint
  FROM (SELECT count(*) AS read FROM r) AS n
  LEFT JOIN r ON r.token IS NULL
