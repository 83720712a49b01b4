-- migrate_index_concurrently.sql builds the expiry index on a table that
-- exists, outside any transaction. It takes a SHARE UPDATE EXCLUSIVE lock,
-- which claims, extensions and done markers do not wait for, and waits out
-- the transactions that write to the table, or are older than the build,
-- under the connection's lock_timeout. A build that fails leaves an INVALID
-- index, which migrate_state.sql reports and migrate_index_drop.sql drops.
CREATE INDEX CONCURRENTLY IF NOT EXISTS {index} ON {table} (expires_at)
