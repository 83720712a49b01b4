-- claim.sql claims a key, or reports its current state, in one statement.
--
-- Parameters:
--   $1 key (bytea), $2 token (uuid), $3 fingerprint (bytea),
--   $4 lease in microseconds (bigint), $5 lock_timeout (text, such as '100ms').
--
-- A key whose row is live in the statement's snapshot is reported as it is,
-- without a lock or a write, so duplicates cost no commit. Otherwise the key
-- is claimed when it is absent or its row (running or done) has expired on
-- the database clock. lock_timeout is set for this statement's transaction
-- before the insert can wait on a row lock, so a claim never hangs behind
-- another transaction that holds the key (a transactional record not yet
-- committed): it fails with SQLSTATE 55P03 instead, reported as running.
--
-- A new claim's fence is the database clock in microseconds since the Unix
-- epoch, or one more than the fence of the expired row it takes over (rows
-- stay until pruned), whichever is larger.
--
-- Reply: one row (claimed, done, fingerprint, result, remaining_us, fence):
--   claimed = true                 the key is now held by $2 (or was already:
--                                  the same claim sent again), with fence;
--   claimed = false, done = true   the key is done: its fingerprint, result
--                                  and remaining retention in microseconds;
--   claimed = false, done = false  another token holds it: its fingerprint and
--                                  the remaining lease in microseconds.
-- No row means the conflicting row was committed or deleted after this
-- statement's snapshot was taken: run it again.
WITH existing AS (
    SELECT token IS NULL AS done, coalesce(token = $2, false) AS mine,
           fingerprint, result, expires_at, coalesce(fence, 0) AS fence
      FROM {table}
     WHERE key = $1 AND expires_at > clock_timestamp()
), claimed AS (
    INSERT INTO {table} AS t (key, token, fingerprint, result, expires_at, fence)
    SELECT $1, $2, $3, NULL, clock_timestamp() + $4::bigint * interval '1 microsecond',
           floor(extract(epoch FROM clock_timestamp()) * 1000000)::bigint
      FROM (SELECT set_config('lock_timeout', $5::text, true) OFFSET 0) AS settings
     WHERE NOT EXISTS (SELECT FROM existing)
    ON CONFLICT (key) DO UPDATE
       SET token = excluded.token,
           fingerprint = excluded.fingerprint,
           result = NULL,
           expires_at = excluded.expires_at,
           fence = greatest(excluded.fence, coalesce(t.fence, 0) + 1)
     WHERE t.expires_at <= clock_timestamp()
    RETURNING t.fence
), current AS (
    -- The row appeared after the snapshot, or is live again after a takeover.
    -- ON CONFLICT has locked it; FOR SHARE makes this read follow it to its
    -- newest version rather than the one in the statement's snapshot.
    SELECT token IS NULL AS done, coalesce(token = $2, false) AS mine,
           fingerprint, result, expires_at, coalesce(fence, 0) AS fence
      FROM {table}
     WHERE key = $1
       AND NOT EXISTS (SELECT FROM existing)
       AND NOT EXISTS (SELECT FROM claimed)
       FOR SHARE
), state AS (
    SELECT * FROM existing
    UNION ALL
    SELECT * FROM current
)
SELECT true, false, NULL::bytea, NULL::bytea, 0::bigint, fence
  FROM claimed
UNION ALL
SELECT mine, done, fingerprint,
       CASE WHEN done THEN result END,
       greatest(0, (extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::bigint),
       fence
  FROM state
