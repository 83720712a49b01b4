-- migrate_unlock.sql ends a migration on its connection: it resets
-- lock_timeout to the session's starting value, then releases the advisory
-- lock migrate_lock.sql took. $1 is the table's name as given to
-- migrate_lock.sql. Reply: whether the lock was held.
SELECT pg_advisory_unlock(hashtext('jobonce migrate ' || $1::text))
  FROM (SELECT set_config('lock_timeout', reset_val, false)
          FROM pg_catalog.pg_settings WHERE name = 'lock_timeout' OFFSET 0) AS reset
