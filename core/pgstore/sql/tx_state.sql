-- tx_state.sql ends a record attempt's batch (before the savepoint's
-- release): it gives lock_timeout back the value tx_insert.sql or
-- tx_lock_timeout.sql saved, and reads the key's current row for when the
-- key was not recorded. It is a statement of its own so that, under READ
-- COMMITTED, its snapshot includes a row committed while the record's
-- statement waited, and so that the restore comes after any wait.
--
-- Parameters: $1 key (bytea).
-- Reply: one row (found, done, fingerprint, remaining_us, live); when the
-- key has no row (or it is gone again), found is false, done and live are
-- false, fingerprint is NULL and remaining_us is 0.
SELECT k.done IS NOT NULL,
       coalesce(k.done, false),
       k.fingerprint,
       coalesce(k.remaining, 0),
       coalesce(k.live, false)
  FROM (SELECT set_config('lock_timeout', current_setting('jobonce.lock_timeout'), true) OFFSET 0) AS restored
  LEFT JOIN (
    SELECT token IS NULL AS done,
           fingerprint,
           greatest(0, (extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::bigint) AS remaining,
           expires_at > clock_timestamp() AS live
      FROM {table}
     WHERE key = $1
  ) AS k ON true
