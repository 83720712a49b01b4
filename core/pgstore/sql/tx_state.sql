-- tx_state.sql reads a key's current row after tx_record.sql found it taken.
-- It is a statement of its own so that, under READ COMMITTED, its snapshot
-- includes a row committed while the insert waited.
--
-- Parameters: $1 key (bytea).
-- Reply: (done, fingerprint, remaining_us, live), or no row when the row is
-- gone again.
SELECT token IS NULL,
       fingerprint,
       greatest(0, (extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::bigint),
       expires_at > clock_timestamp()
  FROM {table}
 WHERE key = $1
