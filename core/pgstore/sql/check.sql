-- check.sql reads no rows; it fails when the table or one of its columns is
-- missing (SQLSTATE 42P01 or 42703), which New reports as "run Migrate".
SELECT key, token, fingerprint, result, expires_at, fence FROM {table} LIMIT 0
