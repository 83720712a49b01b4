-- table_schema.sql returns the schema that holds the keys table, as the
-- connection's search_path resolves its name, so that the store's channel
-- (notify.go) names it: stores on tables of one name in several schemas of
-- a database then notify apart.
--
-- Parameters: $1 the table's name as written in SQL (quoted; with its
--   schema when Config.Schema is set).
-- Reply: one row (the schema's name), none when the table is missing.
SELECT n.nspname::text
  FROM pg_catalog.pg_class c
  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
 WHERE c.oid = to_regclass($1::text)
