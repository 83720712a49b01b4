-- check_table.sql reads from the catalog alone, for jobonce check, whether
-- the keys table is there and migrated, as pgstore's migrate_state.sql
-- does; it takes no lock on the table.
--
-- Parameters:
--   $1 the table's name as written in SQL (quoted; with its schema when
--      -schema is set), resolved through the search_path like pgstore's.
--   $2 the expiry index's name, unquoted.
-- Reply, one row:
--   schema         the schema that holds the table; '' when it is missing.
--   table_exists   whether the table exists.
--   fence_exists   whether it has the fence column.
--   index_state    'valid', 'invalid' (a failed concurrent build left it),
--                  or 'missing'.
--   rows_estimate  the planner's estimate of the table's rows (reltuples;
--                  -1 before the table was first vacuumed or analyzed).
SELECT coalesce(n.nspname::text, ''),
       c.oid IS NOT NULL,
       EXISTS (SELECT FROM pg_catalog.pg_attribute a
                WHERE a.attrelid = c.oid AND a.attname = 'fence' AND a.attnum > 0 AND NOT a.attisdropped),
       coalesce((SELECT CASE WHEN x.indisvalid THEN 'valid' ELSE 'invalid' END
                   FROM pg_catalog.pg_class i
                   JOIN pg_catalog.pg_index x ON x.indexrelid = i.oid
                  WHERE i.relnamespace = c.relnamespace AND i.relname = $2::text), 'missing'),
       coalesce(c.reltuples, -1)::bigint
  FROM (SELECT to_regclass($1::text) AS oid) AS r
  LEFT JOIN pg_catalog.pg_class c ON c.oid = r.oid
  LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
