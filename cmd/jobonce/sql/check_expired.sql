-- check_expired.sql counts, for jobonce check, the expired rows that wait
-- for pgstore's Prune (RunPruner), through the expiry index and up to a
-- bound, so it costs no more on a large table.
--
-- Parameters: $1 the most rows to count (bigint).
-- Reply: one row (count, oldest_us): how many expired rows there are, up to
-- $1, and how long ago the oldest of them expired, in microseconds (NULL
-- when there is none).
SELECT count(*),
       (extract(epoch FROM statement_timestamp() - min(e.expires_at)) * 1000000)::bigint
  FROM (SELECT expires_at FROM {table}
         WHERE expires_at <= statement_timestamp()
         ORDER BY expires_at
         LIMIT $1) AS e
