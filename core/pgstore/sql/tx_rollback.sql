-- tx_rollback.sql undoes a failed record attempt: it rolls back to the
-- savepoint (which also restores lock_timeout) and releases it, leaving the
-- caller's transaction usable.
ROLLBACK TO SAVEPOINT jobonce_record;
RELEASE SAVEPOINT jobonce_record
