package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobonce/jobonce/core/pgstore"
	"github.com/jobonce/jobonce/internal/redisops"
)

// indexSuffix names pgstore's expiry index after its table.
const indexSuffix = "_expires_at_idx"

// expiredCountLimit is the most expired rows check counts.
const expiredCountLimit = 100000

// pgServer is what check_server.sql reads of a PostgreSQL server.
type pgServer struct {
	version    string
	up         time.Duration
	standby    bool
	fsync      string
	syncCommit string
	syncNames  string
	standbys   int64
	flushLag   *time.Duration // nil when no standby reports one
}

// commitsWaitForStandby reports whether a commit returns only once a
// synchronous standby has its WAL: synchronous_standby_names names one and
// synchronous_commit waits for it.
func (s pgServer) commitsWaitForStandby() bool {
	return s.syncNames != "" && slices.Contains([]string{"on", "remote_write", "remote_apply"}, s.syncCommit)
}

// risks returns the ways s can lose committed rows, and so done markers.
func (s pgServer) risks(maxLag time.Duration) []redisops.Risk {
	var risks []redisops.Risk
	if s.fsync == "off" {
		risks = append(risks, redisops.Risk{Kind: redisops.RiskPersistence, Detail: "fsync off: a crash of the server's machine can lose or corrupt committed rows, done markers among them: duplicates can run"})
	}
	if s.syncCommit == "off" {
		risks = append(risks, redisops.Risk{Kind: redisops.RiskPersistence, Detail: "synchronous_commit off: a crash loses the last commits (up to 3 x wal_writer_delay), done markers among them: duplicates can run; set it on for the workers' role"})
	}
	if s.standby || s.commitsWaitForStandby() {
		return risks
	}
	switch {
	case s.standbys == 0:
		risks = append(risks, redisops.Risk{Kind: redisops.RiskReplication, Detail: "primary with no standby streaming: duplicates can run after this server is lost, with every done marker on it"})
	case s.flushLag != nil && *s.flushLag > maxLag:
		risks = append(risks, redisops.Risk{Kind: redisops.RiskReplication, Detail: fmt.Sprintf(
			"standby flush lag %s is above %s and commits wait for no standby: duplicates can run after a failover, which loses the done markers of the last %s",
			*s.flushLag, maxLag, *s.flushLag)})
	}
	return risks
}

// pgTableState is what check_table.sql reads of the keys table.
type pgTableState struct {
	schema       string
	exists       bool
	fence        bool
	index        string // valid, invalid or missing
	rowsEstimate int64
}

// checkPostgres prints what decides whether the database keeps done
// markers, with a RISK line per way it can lose them, then the state of
// table. Its error wraps errRisk when a risk is of a kind in failOn; a
// missing table or column is an error of its own, which comes first.
func checkPostgres(ctx context.Context, pool *pgxpool.Pool, table pgTable, out io.Writer, failOn []redisops.RiskKind, maxLag time.Duration, prefix string) error {
	var s pgServer
	var upUs int64
	var lagUs *int64
	err := pool.QueryRow(ctx, loadSQL("check_server", "")).Scan(&s.version, &upUs, &s.standby, &s.fsync, &s.syncCommit, &s.syncNames, &s.standbys, &lagUs)
	if err != nil {
		return fmt.Errorf("check: reading the server's settings: %w", err)
	}
	s.up = micros(upUs).Round(time.Second)
	if lagUs != nil {
		lag := micros(*lagUs)
		s.flushLag = &lag
	}
	c := pool.Config().ConnConfig
	role := "primary"
	if s.standby {
		role = "standby (read-only: workers claim on the primary, and release and forget fail here)"
	}
	fmt.Fprintf(out, "server PostgreSQL %s at %s, database %s (%s, up %s)\n", s.version, c.Host+":"+strconv.Itoa(int(c.Port)), c.Database, role, s.up)
	fmt.Fprintf(out, "  durability: fsync %s, synchronous_commit %s (as this role's sessions see it)\n", s.fsync, s.syncCommit)
	lag := "none reported"
	if s.flushLag != nil {
		lag = s.flushLag.String()
	}
	waits := "commits wait for no standby"
	if s.commitsWaitForStandby() {
		waits = "commits wait for a synchronous standby"
	}
	fmt.Fprintf(out, "  replication: %d standbys streaming, largest flush lag %s, synchronous_standby_names %q: %s\n", s.standbys, lag, s.syncNames, waits)
	risks := s.risks(maxLag)
	printRisks(out, risks)
	if len(risks) == 0 {
		fmt.Fprintln(out, "  ok: done markers survive restarts and failovers")
	}
	if err := checkTable(ctx, pool, table, out); err != nil {
		return err
	}
	if !s.standby { // read-only: said above
		store, err := pgstore.New(ctx, pool, &pgstore.Config{Schema: table.schema, Table: table.name})
		if err != nil {
			return err
		}
		if err := checkClaims(ctx, store, out, prefix); err != nil {
			return err
		}
	}
	return riskError(failing(risks, failOn, nil))
}

// checkTable prints whether table, its fence column and its expiry index
// are there, and how many expired rows wait for Prune. It returns an error
// when the table or its fence column is missing, as pgstore.New does.
func checkTable(ctx context.Context, pool *pgxpool.Pool, table pgTable, out io.Writer) error {
	var t pgTableState
	index := table.name + indexSuffix
	err := pool.QueryRow(ctx, loadSQL("check_table", ""), table.quoted(), index).Scan(&t.schema, &t.exists, &t.fence, &t.index, &t.rowsEstimate)
	if err != nil {
		return fmt.Errorf("check: reading table %s from the catalog: %w", table.quoted(), err)
	}
	if !t.exists {
		where := ""
		if table.schema == "" {
			where = " (looked up through the connection's search_path)"
		}
		fmt.Fprintf(out, "table %s: missing%s\n", table.quoted(), where)
		return fmt.Errorf("check: table %s is missing: run pgstore.Migrate (or set pgstore.Config.Migrate), or give the Guard's -schema and -table", table.quoted())
	}
	rows := "not yet analyzed"
	if t.rowsEstimate >= 0 {
		rows = fmt.Sprintf("about %d rows", t.rowsEstimate)
	}
	fmt.Fprintf(out, "table %s: in schema %q, %s\n", table.quoted(), t.schema, rows)
	if !t.fence {
		fmt.Fprintln(out, "  fence column: missing")
		return fmt.Errorf("check: table %s has no fence column, which this version needs: run pgstore.Migrate (or set pgstore.Config.Migrate)", table.quoted())
	}
	fmt.Fprintln(out, "  fence column: present")
	switch t.index {
	case "valid":
		fmt.Fprintf(out, "  expiry index %q: valid\n", index)
	case "invalid":
		fmt.Fprintf(out, "  expiry index %q: INVALID, left by a failed concurrent build: Prune scans the whole table; pgstore.Migrate builds it again\n", index)
	default:
		fmt.Fprintf(out, "  expiry index %q: missing: Prune scans the whole table; pgstore.Migrate builds it\n", index)
	}
	if t.index != "valid" {
		fmt.Fprintln(out, "  expired rows: not counted without the expiry index")
		return nil
	}
	var n int64
	var oldestUs *int64
	err = pool.QueryRow(ctx, loadSQL("check_expired", table.quoted()), int64(expiredCountLimit+1)).Scan(&n, &oldestUs)
	if err != nil {
		return fmt.Errorf("check: counting expired rows of %s: %w", table.quoted(), err)
	}
	switch {
	case n == 0:
		fmt.Fprintln(out, "  expired rows waiting for Prune: none")
	case n > expiredCountLimit:
		fmt.Fprintf(out, "  expired rows waiting for Prune: over %d, the oldest expired %s ago (pgstore.Prune and RunPruner delete them)\n", expiredCountLimit, micros(*oldestUs).Round(time.Second))
	default:
		fmt.Fprintf(out, "  expired rows waiting for Prune: %d, the oldest expired %s ago (pgstore.Prune and RunPruner delete them)\n", n, micros(*oldestUs).Round(time.Second))
	}
	return nil
}
