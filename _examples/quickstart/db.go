package main

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"time"

	_ "github.com/go-sql-driver/mysql"  // driver "mysql"
	_ "github.com/jackc/pgx/v5/stdlib"  // driver "pgx"
	_ "github.com/microsoft/go-mssqldb" // driver "sqlserver"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/internal/dsn"
	"github.com/relayer-go/watermill-outbox/mysql"
	"github.com/relayer-go/watermill-outbox/postgres"
	"github.com/relayer-go/watermill-outbox/sqlserver"
)

// dialect is what differs between the three databases in this demo: the driver, the
// outbox store and the SQL of the application's own orders table.
type dialect struct {
	driver      string
	ordersDDL   string // idempotent
	insertOrder string // id, customer, amount_cents
	countOrder  string // id
	newStore    func(*sql.DB, outbox.Options) (outbox.Store, error)
}

var safeName = regexp.MustCompile(`^[A-Za-z0-9_]*$`)

func dialectFor(name, prefix string) (dialect, error) {
	// The orders table is the demo's own, so its name is checked here; the outbox store
	// validates and quotes its table names itself.
	if !safeName.MatchString(prefix) || len(prefix) > 40 {
		return dialect{}, fmt.Errorf("-prefix %q: use at most 40 letters, digits and underscores", prefix)
	}
	orders := prefix + "orders"
	switch name {
	case "mysql":
		return dialect{
			driver: "mysql",
			ordersDDL: "CREATE TABLE IF NOT EXISTS `" + orders + "` (" +
				"id VARCHAR(40) NOT NULL PRIMARY KEY, customer VARCHAR(64) NOT NULL, " +
				"amount_cents BIGINT NOT NULL, created_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)) ENGINE=InnoDB",
			insertOrder: "INSERT INTO `" + orders + "` (id, customer, amount_cents) VALUES (?, ?, ?)",
			countOrder:  "SELECT COUNT(*) FROM `" + orders + "` WHERE id = ?",
			newStore: func(db *sql.DB, o outbox.Options) (outbox.Store, error) {
				return mysql.New(db, o)
			},
		}, nil
	case "postgres":
		return dialect{
			driver: "pgx",
			ordersDDL: `CREATE TABLE IF NOT EXISTS "` + orders + `" (` +
				`id text PRIMARY KEY, customer text NOT NULL, ` +
				`amount_cents bigint NOT NULL, created_at timestamptz NOT NULL DEFAULT now())`,
			insertOrder: `INSERT INTO "` + orders + `" (id, customer, amount_cents) VALUES ($1, $2, $3)`,
			countOrder:  `SELECT COUNT(*) FROM "` + orders + `" WHERE id = $1`,
			newStore: func(db *sql.DB, o outbox.Options) (outbox.Store, error) {
				return postgres.New(db, o)
			},
		}, nil
	case "sqlserver":
		return dialect{
			driver: "sqlserver",
			ordersDDL: `IF OBJECT_ID(N'dbo.[` + orders + `]', N'U') IS NULL CREATE TABLE dbo.[` + orders + `] (` +
				`id nvarchar(40) NOT NULL PRIMARY KEY, customer nvarchar(64) NOT NULL, ` +
				`amount_cents bigint NOT NULL, created_at datetimeoffset(6) NOT NULL DEFAULT SYSUTCDATETIME())`,
			insertOrder: `INSERT INTO dbo.[` + orders + `] (id, customer, amount_cents) VALUES (@p1, @p2, @p3)`,
			countOrder:  `SELECT COUNT(*) FROM dbo.[` + orders + `] WHERE id = @p1`,
			newStore: func(db *sql.DB, o outbox.Options) (outbox.Store, error) {
				return sqlserver.New(db, o)
			},
		}, nil
	}
	return dialect{}, fmt.Errorf("unknown database %q", name)
}

// openDatabase opens and pings the database and deploys both schemas: the outbox tables
// (store.CreateSchema runs the same idempotent DDL as the dialect's CreateScript, which a
// migration tool would run in production) and the demo's orders table.
func openDatabase(ctx context.Context, s settings) (*sql.DB, outbox.Store, dialect, error) {
	d, err := dialectFor(s.db, s.prefix)
	if err != nil {
		return nil, nil, d, err
	}
	db, err := sql.Open(d.driver, s.dsn)
	if err != nil {
		return nil, nil, d, fmt.Errorf("open %s %s: %s", s.db, dsn.Redact(s.dsn), dsn.Scrub(err.Error(), s.dsn))
	}
	// A forwarder runs one worker per lane it holds (64 by default): unbounded, they would
	// open a connection each after every burst, and database/sql keeps only two idle.
	db.SetMaxOpenConns(16)
	db.SetMaxIdleConns(16)
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := db.PingContext(pingCtx); err != nil {
		db.Close()
		return nil, nil, d, fmt.Errorf("connect to %s at %s: %s\n  (is the server running? `make demo` starts a local one with scripts/services)",
			s.db, dsn.Redact(s.dsn), dsn.Scrub(err.Error(), s.dsn))
	}
	store, err := d.newStore(db, outbox.Options{TablePrefix: s.prefix})
	if err != nil {
		db.Close()
		return nil, nil, d, err
	}
	if err := store.CreateSchema(ctx); err != nil {
		db.Close()
		return nil, nil, d, fmt.Errorf("create the outbox schema: %s", dsn.Scrub(err.Error(), s.dsn))
	}
	if _, err := db.ExecContext(ctx, d.ordersDDL); err != nil {
		db.Close()
		return nil, nil, d, fmt.Errorf("create the orders table: %s", dsn.Scrub(err.Error(), s.dsn))
	}
	return db, store, d, nil
}
