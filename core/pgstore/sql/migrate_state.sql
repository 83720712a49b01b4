-- migrate_state.sql reads from the catalog alone what the migration would
-- change. It takes no lock on the keys table (to_regclass resolves the name
-- without one), so it never waits for a transaction that uses the table.
--
-- Parameters:
--   $1 the table's name as written in SQL (quoted; with its schema when
--      Config.Schema is set), resolved like the store's statements.
--   $2 the index's name, unquoted.
--   $3 Config.Schema, or '' when unset.
-- Reply, one row:
--   schema        the schema that holds the table, or, when it is missing,
--                 the one CREATE TABLE puts it in ($3, or current_schema());
--                 '' when there is none.
--   table_exists  whether the table exists.
--   fence_exists  whether it has the fence column.
--   index_exists  whether its schema holds a relation named $2 that is not
--                 an INVALID index (one a failed concurrent build left).
--   index_invalid whether that relation is an INVALID index.
SELECT coalesce(n.nspname::text, nullif($3::text, ''), current_schema()::text, '') AS schema,
       c.oid IS NOT NULL AS table_exists,
       EXISTS (SELECT FROM pg_catalog.pg_attribute a
                WHERE a.attrelid = c.oid AND a.attname = 'fence' AND a.attnum > 0 AND NOT a.attisdropped) AS fence_exists,
       EXISTS (SELECT FROM pg_catalog.pg_class i
                WHERE i.relnamespace = c.relnamespace AND i.relname = $2::text
                  AND NOT EXISTS (SELECT FROM pg_catalog.pg_index x
                                   WHERE x.indexrelid = i.oid AND NOT x.indisvalid)) AS index_exists,
       EXISTS (SELECT FROM pg_catalog.pg_class i
                 JOIN pg_catalog.pg_index x ON x.indexrelid = i.oid
                WHERE i.relnamespace = c.relnamespace AND i.relname = $2::text
                  AND NOT x.indisvalid) AS index_invalid
  FROM (SELECT to_regclass($1::text) AS oid) r
  LEFT JOIN pg_catalog.pg_class c ON c.oid = r.oid
  LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
