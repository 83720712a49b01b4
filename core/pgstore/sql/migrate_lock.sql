-- migrate_lock.sql sets lock_timeout to $1 (text, such as '2000ms') for the
-- migration's connection, so that each lock the migration waits for (this
-- advisory lock, then the table locks of its DDL and the transactions the
-- concurrent index build waits out) is bounded, and then takes the advisory
-- lock that serialises migrations of one table: $2 is the table's fully
-- qualified, quoted name ("schema"."table"), the same for a process that
-- sets Config.Schema and one whose search_path leads there. The lock is the
-- session's, so it spans the index build that runs outside a transaction;
-- migrate_unlock.sql releases it and resets lock_timeout. The subquery
-- (fenced by OFFSET 0) runs first, so the lock waits under the timeout.
SELECT pg_advisory_lock(hashtext('jobonce migrate ' || $2::text))
  FROM (SELECT set_config('lock_timeout', $1::text, false) OFFSET 0) AS bounded
