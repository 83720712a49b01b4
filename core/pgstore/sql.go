package pgstore

import (
	"embed"
	"strings"

	"github.com/jackc/pgx/v5"
)

//go:embed sql/*.sql
var sqlFiles embed.FS

// statements holds the store's SQL with the table's quoted name in place.
type statements struct {
	migrate                          migrations
	check                            string
	claim, extend, complete, release string
	await, tableSchema               string
	prune                            string
	txSavepoint, txLockTimeout       string
	txInsert, txRecord, txState      string
	txRelease, txRollback            string
	txID, txStatus, txEnd            string
	commit                           string
}

// migrations holds the migration's statements (sql/migrate_*.sql).
type migrations struct {
	table, fence, index          string // the changes, in the order they run
	indexConcurrently            string // the index, on a table that exists
	indexDrop                    string // an INVALID index, with {qualified_index} to fill in
	state, lock, unlock, holders string
}

func newStatements(cfg *Config) statements {
	table := pgx.Identifier{cfg.Table}
	if cfg.Schema != "" {
		table = pgx.Identifier{cfg.Schema, cfg.Table}
	}
	r := strings.NewReplacer(
		"{table}", table.Sanitize(),
		"{index}", pgx.Identifier{cfg.Table + indexSuffix}.Sanitize(),
	)
	load := func(name string) string {
		b, err := sqlFiles.ReadFile("sql/" + name + ".sql")
		if err != nil {
			panic("pgstore: missing embedded sql/" + name + ".sql") // a build defect, caught by every test
		}
		return r.Replace(string(b))
	}
	migrate := migrations{
		table:             load("migrate_table"),
		fence:             load("migrate_fence"),
		index:             load("migrate_index"),
		indexConcurrently: load("migrate_index_concurrently"),
		indexDrop:         load("migrate_index_drop"),
		state:             load("migrate_state"),
		lock:              load("migrate_lock"),
		unlock:            load("migrate_unlock"),
		holders:           load("migrate_holders"),
	}
	return statements{
		migrate:       migrate,
		check:         load("check"),
		claim:         load("claim"),
		extend:        load("extend"),
		complete:      load("complete"),
		release:       load("release"),
		await:         load("await"),
		tableSchema:   load("table_schema"),
		prune:         load("prune"),
		txSavepoint:   load("tx_savepoint"),
		txLockTimeout: load("tx_lock_timeout"),
		txInsert:      load("tx_insert"),
		txRecord:      load("tx_record"),
		txState:       load("tx_state"),
		txRelease:     load("tx_release"),
		txRollback:    load("tx_rollback"),
		txID:          load("tx_id"),
		txStatus:      load("tx_status"),
		txEnd:         load("tx_end"),
		commit:        load("commit"),
	}
}

// tableName returns the table's name as written in SQL, for messages.
func tableName(cfg *Config) string {
	if cfg.Schema != "" {
		return pgx.Identifier{cfg.Schema, cfg.Table}.Sanitize()
	}
	return pgx.Identifier{cfg.Table}.Sanitize()
}
