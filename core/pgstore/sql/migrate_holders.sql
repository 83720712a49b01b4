-- migrate_holders.sql names the backends in the way of a migration whose
-- lock wait timed out, for its error: those holding (or queued before it
-- for) a lock that conflicts with the one it waited for.
--
-- Parameters:
--   $1 the table's name as written in SQL.
--   $2 the lock modes that conflict with the table lock waited for (text[]),
--      or NULL when the wait was for the advisory lock.
--   $3 the advisory lock's table name, as given to migrate_lock.sql.
-- Reply: up to 3 rows, granted locks first, oldest transaction first:
--   pid (0 for a prepared transaction), mode, granted, state ('' when
--   hidden), xact_start (NULL when hidden or none), and the transaction's
--   age in microseconds (0 when unknown).
SELECT coalesce(l.pid, 0), l.mode, l.granted, coalesce(a.state, ''), a.xact_start,
       coalesce(floor(extract(epoch FROM now() - a.xact_start) * 1000000)::bigint, 0)
  FROM pg_catalog.pg_locks l
  LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
 WHERE l.pid IS DISTINCT FROM pg_backend_pid()
   AND l.database IS NOT DISTINCT FROM (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())
   AND CASE WHEN $2::text[] IS NULL
            THEN l.locktype = 'advisory' AND l.objsubid = 1
             AND ((l.classid::bigint << 32) | l.objid::bigint) = hashtext('jobonce migrate ' || $3::text)::bigint
            ELSE l.locktype = 'relation' AND l.relation = to_regclass($1::text) AND l.mode = ANY ($2::text[])
       END
 ORDER BY l.granted DESC, a.xact_start NULLS LAST
 LIMIT 3
