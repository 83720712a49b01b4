package main

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobonce/jobonce/core/driver"
	"github.com/jobonce/jobonce/core/pgstore"
)

//go:embed sql/*.sql
var sqlFiles embed.FS

// loadSQL returns sql/name.sql with {table} replaced by table, quoted.
func loadSQL(name, table string) string {
	b, err := sqlFiles.ReadFile("sql/" + name + ".sql")
	if err != nil {
		panic("jobonce: missing embedded sql/" + name + ".sql") // a build defect, caught by every test
	}
	return strings.ReplaceAll(string(b), "{table}", table)
}

// pgKeys is a Guard's PostgreSQL table, as the commands act on it.
type pgKeys struct {
	pool      *pgxpool.Pool
	store     *pgstore.Store
	table     string // quoted, as in SQL
	host      string
	database  string
	inspectQ  string
	forgetQ   string
	schemaSet bool
}

var _ keyStore = (*pgKeys)(nil)

// pgTable is a PostgreSQL table named by -schema and -table.
type pgTable struct {
	schema, name string
}

// quoted returns the table's name as written in SQL.
func (t pgTable) quoted() string {
	if t.schema != "" {
		return pgx.Identifier{t.schema, t.name}.Sanitize()
	}
	return pgx.Identifier{t.name}.Sanitize()
}

// check refuses a name pgstore refuses, naming the flag.
func (t pgTable) check() error {
	_, err := pgstore.MigrationSQL(&pgstore.Config{Schema: t.schema, Table: t.name})
	if err != nil {
		field := "-table"
		if strings.Contains(err.Error(), "Config.Schema") {
			field = "-schema"
		}
		return fmt.Errorf("%s: %w", field, err)
	}
	return nil
}

// openPool returns a pool on the database at rawURL (a URL or key=value
// settings), which connects on its first statement.
func openPool(ctx context.Context, rawURL string) (*pgxpool.Pool, error) {
	if strings.Contains(rawURL, "://") {
		if err := checkFragment(rawURL); err != nil {
			return nil, fmt.Errorf("-postgres: %w", err)
		}
	}
	cfg, err := pgxpool.ParseConfig(rawURL)
	if err != nil {
		return nil, fmt.Errorf("-postgres: %w", err)
	}
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("-postgres: %w", err)
	}
	return pool, nil
}

// openPostgres returns the table of schema and table in the database at
// rawURL, and checks that it exists and is migrated (pgstore.New).
func openPostgres(ctx context.Context, rawURL, schema, table string) (*pgKeys, error) {
	t := pgTable{schema: schema, name: table}
	if err := t.check(); err != nil {
		return nil, err
	}
	pool, err := openPool(ctx, rawURL)
	if err != nil {
		return nil, err
	}
	store, err := pgstore.New(ctx, pool, &pgstore.Config{Schema: schema, Table: table})
	if err != nil {
		pool.Close()
		if errors.Is(err, pgstore.ErrNotMigrated) {
			return nil, fmt.Errorf("%w: check -postgres, -schema and -table, which must name the Guard's database and pgstore.Config", err)
		}
		return nil, err
	}
	c := pool.Config().ConnConfig
	return &pgKeys{
		pool: pool, store: store, table: t.quoted(), schemaSet: schema != "",
		host: c.Host + ":" + strconv.Itoa(int(c.Port)), database: c.Database,
		inspectQ: loadSQL("inspect", t.quoted()), forgetQ: loadSQL("forget", t.quoted()),
	}, nil
}

func (p *pgKeys) inspect(ctx context.Context, key string) (record, error) {
	var (
		token       pgtype.UUID
		fingerprint []byte
		result      []byte
		fence       *int64
		expiresAt   time.Time
		live        bool
		remaining   int64
		age         *int64
	)
	err := p.pool.QueryRow(ctx, p.inspectQ, []byte(key)).Scan(&token, &fingerprint, &result, &fence, &expiresAt, &live, &remaining, &age)
	if errors.Is(err, pgx.ErrNoRows) {
		return record{}, nil
	}
	if err != nil {
		return record{}, fmt.Errorf("inspecting %s: %w", p.table, err)
	}
	if !live {
		return record{expired: &expiredRow{done: !token.Valid, ago: micros(-remaining)}}, nil
	}
	rec := record{
		State: driver.StateDone, Fingerprint: string(fingerprint), Result: result,
		TTL: micros(remaining), expiresAt: expiresAt, rowFence: fence,
	}
	if token.Valid {
		rec.State, rec.Token, rec.Result = driver.StateRunning, token.Bytes, nil
		if fence != nil && age != nil {
			rec.Fence, rec.Age = *fence, micros(*age)
		}
	}
	return rec, nil
}

// micros converts microseconds to a Duration, zero when negative.
func micros(us int64) time.Duration { return time.Duration(max(us, 0)) * time.Microsecond }

func (p *pgKeys) release(ctx context.Context, key string, token driver.Token) error {
	return p.store.Release(ctx, key, token)
}

func (p *pgKeys) forget(ctx context.Context, key string, rec record) (bool, error) {
	if rec.State != driver.StateDone {
		return false, nil
	}
	tag, err := p.pool.Exec(ctx, p.forgetQ, []byte(key), rec.expiresAt, rec.rowFence)
	if err != nil {
		return false, fmt.Errorf("forget: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

func (p *pgKeys) name() string { return "PostgreSQL" }

func (p *pgKeys) where() string {
	return fmt.Sprintf("PostgreSQL table %s in database %s at %s", p.table, p.database, p.host)
}

func (p *pgKeys) databaseHint() string {
	hint := "the Guard uses another database or table (-postgres, -schema, -table: its pgstore.Config.Schema and Table)"
	if !p.schemaSet {
		hint += ", or its search_path finds another schema's table (give -schema)"
	}
	return hint
}

func (p *pgKeys) close() { p.pool.Close() }
