-- migrate_index.sql creates the expiry index that pruning reads. It takes a
-- SHARE lock on the table (no row can be written while the index builds),
-- so pgstore.Migrate runs it only in the transaction that creates the table,
-- which no one else can see yet; on a table that exists it builds the index
-- with migrate_index_concurrently.sql.
CREATE INDEX IF NOT EXISTS {index} ON {table} (expires_at);
