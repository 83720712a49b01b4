-- migrate_index.sql creates the expiry index that pruning reads. It takes a
-- SHARE lock on the table (no row can be written while the index builds),
-- so pgstore.Migrate runs it only when the catalog lacks it.
CREATE INDEX IF NOT EXISTS {index} ON {table} (expires_at);
