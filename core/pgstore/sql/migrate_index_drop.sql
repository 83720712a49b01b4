-- migrate_index_drop.sql drops the INVALID expiry index an earlier
-- concurrent build left, outside any transaction and without blocking
-- writes, so the build can run again. pgstore fills in {qualified_index},
-- the index's name with the schema that holds the table.
DROP INDEX CONCURRENTLY IF EXISTS {qualified_index}
