-- tx_lock_timeout.sql saves the transaction's lock_timeout in the custom
-- setting jobonce.lock_timeout, then sets lock_timeout to $1 (text, such as
-- '100ms'), both for the current transaction only. The subquery (fenced by
-- OFFSET 0) runs first, so the value saved is the caller's. It comes
-- before tx_record.sql; tx_state.sql restores the value.
SELECT set_config('lock_timeout', $1::text, true)
  FROM (SELECT set_config('jobonce.lock_timeout', current_setting('lock_timeout'), true) OFFSET 0) AS saved
