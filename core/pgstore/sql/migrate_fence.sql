-- migrate_fence.sql adds the fence column to a table an earlier version
-- created. It takes an ACCESS EXCLUSIVE lock on the table, even when the
-- column exists, so pgstore.Migrate runs it only when the catalog lacks it.
ALTER TABLE {table} ADD COLUMN IF NOT EXISTS fence bigint;
