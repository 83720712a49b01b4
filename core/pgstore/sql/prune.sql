-- prune.sql deletes up to $1 (integer) expired rows.
--
-- The rows are picked through the expiry index (statement_timestamp() is
-- stable, so the index can use it; it is never later than the clock, so a
-- row it calls expired is expired) and deleted through the primary key: the
-- cost follows the batch, not the table. Rows locked by someone else are
-- skipped, and the DELETE checks expiry again on the newest version of each
-- row it removes, so a claim that took over an expired row meanwhile is never
-- deleted. Rows of transactions not yet committed are invisible here.
--
-- The rows stay locked until the statement's transaction commits, and a
-- claim of one of those keys waits for that: the commit does not wait for
-- its WAL to reach the disk (synchronous_commit off, for this transaction
-- only), so the locks go as soon as the DELETE is done. A prune lost in a
-- crash leaves expired rows behind, which the next prune deletes.
-- Reply: the command tag with the number of rows deleted.
DELETE FROM {table}
 WHERE key = ANY (ARRAY(
        SELECT key FROM {table}
         WHERE expires_at <= statement_timestamp()
         ORDER BY expires_at
         LIMIT $1
           FOR UPDATE SKIP LOCKED))
   AND expires_at <= statement_timestamp()
   AND (SELECT set_config('synchronous_commit', 'off', true)) = 'off'
