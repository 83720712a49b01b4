-- check_server.sql reads, for jobonce check, what decides whether the
-- database keeps jobonce's rows through crashes and failovers. It needs no
-- privilege beyond connecting: pg_stat_replication shows a role without
-- pg_read_all_stats every standby but not its lag (NULL here), and the
-- lags are NULL too while a standby is caught up and idle.
--
-- No parameters.
-- Reply: one row:
--   version                    server_version.
--   up_us                      microseconds since the server started.
--   standby                    whether this server is a standby (in recovery).
--   fsync, synchronous_commit  the settings, as this role's sessions see them.
--   synchronous_standby_names  the setting ('' when commits wait for no standby).
--   standbys                   the standbys streaming from this server.
--   flush_lag_us               the largest flush lag among them, in
--                              microseconds, or NULL when none is known.
SELECT current_setting('server_version'),
       (extract(epoch FROM now() - pg_postmaster_start_time()) * 1000000)::bigint,
       pg_is_in_recovery(),
       current_setting('fsync'),
       current_setting('synchronous_commit'),
       current_setting('synchronous_standby_names'),
       (SELECT count(*) FROM pg_stat_replication),
       (SELECT (extract(epoch FROM max(flush_lag)) * 1000000)::bigint FROM pg_stat_replication)
