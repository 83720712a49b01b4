-- migrate_table.sql creates jobonce's keys table. With migrate_fence.sql and
-- migrate_index.sql after it, it is the migration (pgstore.MigrationSQL):
-- idempotent, running it again changes nothing.
--
-- pgstore fills in the quoted table name (Config.Schema, Config.Table) and
-- the index name (the table's name and "_expires_at_idx"). Run it in one
-- transaction. pgstore.Migrate reads the catalog first and runs only the
-- statements a change needs, after an advisory lock that serialises
-- migrations of the table, with lock_timeout set to
-- Config.MigrateLockTimeout.
--
-- Columns:
--   key         the stored key (any bytes).
--   token       the claim's token while the key is running; NULL once done.
--   fingerprint the payload fingerprint (any bytes, empty when none).
--   result      the result stored with a done row, or NULL.
--   expires_at  the end of the lease (running) or of the retention (done),
--               always on the database clock.
--   fence       the fencing token of the claim or transactional record that
--               wrote the row: microseconds since the Unix epoch on the
--               database clock, or one more than the fence of the expired
--               row it replaced, whichever is larger. NULL in rows written
--               before the column existed.
CREATE TABLE IF NOT EXISTS {table} (
    key         bytea       NOT NULL PRIMARY KEY,
    token       uuid,
    fingerprint bytea       NOT NULL DEFAULT '',
    result      bytea,
    expires_at  timestamptz NOT NULL,
    fence       bigint
);
