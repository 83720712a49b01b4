-- tx_restore.sql gives lock_timeout back the value tx_lock_timeout.sql saved.
SELECT set_config('lock_timeout', current_setting('jobonce.lock_timeout'), true)
