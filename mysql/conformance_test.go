package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	driver "github.com/go-sql-driver/mysql"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/internal/testenv"
	"github.com/relayer-go/watermill-outbox/mysql"
	"github.com/relayer-go/watermill-outbox/outboxtest"
)

// dsnVariant names a DSN form the store must not depend on.
type dsnVariant struct {
	name   string
	adjust func(cfg *driver.Config)
}

var (
	plainDSN = dsnVariant{"plain", func(*driver.Config) {}}
	// Every setting that changes what the driver sends or returns: interpolated
	// (text-protocol) statements, affected rows counting unchanged rows, and DATETIME
	// parsed into time.Time in a zone other than UTC (loc=Local where the machine's zone
	// is not UTC; a fixed +05:30 otherwise, since Local is often UTC on servers).
	otherDSN = dsnVariant{"interpolate-foundrows-parsetime", func(cfg *driver.Config) {
		cfg.InterpolateParams = true
		cfg.ClientFoundRows = true
		cfg.ParseTime = true
		cfg.Loc = time.Local
		if _, off := time.Now().In(time.Local).Zone(); off == 0 {
			cfg.Loc = time.FixedZone("+05:30", 5*3600+1800)
		}
	}}
)

// config parses the test DSN and applies v.
func config(t testing.TB, v dsnVariant) *driver.Config {
	t.Helper()
	cfg, err := driver.ParseDSN(testenv.DSN(t, testenv.MySQL))
	if err != nil {
		t.Fatalf("parse %s: %v", testenv.EnvVar(testenv.MySQL), err)
	}
	v.adjust(cfg)
	return cfg
}

func openConfig(cfg *driver.Config) (*sql.DB, error) {
	conn, err := driver.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	return sql.OpenDB(conn), nil
}

// openDB opens the test database with DSN variant v and closes it when t ends.
func openDB(t testing.TB, v dsnVariant) *sql.DB {
	t.Helper()
	db, err := openConfig(config(t, v))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		testenv.Unavailable(t, testenv.MySQL, err)
	}
	return db
}

// harness describes the dialect to the conformance suite over DSN variant v.
func harness(t testing.TB, v dsnVariant) outboxtest.Harness {
	db := openDB(t, v)
	db.SetMaxOpenConns(32)
	db.SetMaxIdleConns(32)
	cfg := config(t, v)
	return outboxtest.Harness{
		Name: "mysql",
		DB:   db,
		NewStore: func(db *sql.DB, opts outbox.Options) (outbox.Store, error) {
			return mysql.New(db, opts)
		},
		Placeholder:    func(int) string { return "?" },
		QualifiedTable: mysql.QualifiedTable,
		CreateFindIndex: func(db *sql.DB, opts outbox.Options) error {
			script, err := mysql.FindIndexScript(opts)
			if err != nil {
				return err
			}
			_, err = db.Exec(script)
			return err
		},
		RowWhere: rowWhere,
		InvalidPrefixes: []outboxtest.InvalidPrefix{
			{Prefix: strings.Repeat("p", mysql.MaxTablePrefixChars+1), ErrContains: "at most 52 characters"},
			{Prefix: strings.Repeat("é", mysql.MaxTablePrefixChars+1), ErrContains: "at most 52 characters"},
			{Prefix: "emoji_\U0001F600_", ErrContains: "supplementary character"},
			{Prefix: "gothic_\U00010348", ErrContains: "supplementary character"},
		},
		QuotePrefix: "q`x_",
		OpenInTimeZone: func(tz string) (*sql.DB, error) {
			c := cfg.Clone()
			if c.Params == nil {
				c.Params = map[string]string{}
			}
			// Unknown DSN parameters are session variables the driver SETs on connect.
			c.Params["time_zone"] = "'" + strings.ReplaceAll(tz, "'", "") + "'"
			db, err := openConfig(c)
			if err != nil {
				return nil, err
			}
			if err := db.Ping(); err != nil {
				_ = db.Close()
				var me *driver.MySQLError
				if errors.As(err, &me) && me.Number == 1298 { // unknown or incorrect time zone
					return nil, fmt.Errorf("time zone %q: %w (%v; load the server's time-zone tables)", tz, errors.ErrUnsupported, err)
				}
				return nil, err
			}
			return db, nil
		},
		OpenDB: func() (*sql.DB, error) { return openConfig(cfg.Clone()) },
		OpenConnectorDB: func() (*sql.DB, error) {
			c, err := mysql.NewConnector(cfg)
			if err != nil {
				return nil, err
			}
			return sql.OpenDB(c), nil
		},
		OpenCountingDB: func(connector bool) (*sql.DB, func() int64, error) { return openCounting(cfg, connector) },
		AuditTriggers:  auditTriggers,
		OpenSerializable: func() (*sql.DB, error) {
			return openSerializable(cfg)
		},
		MaxParams: 65535,
	}
}

// openSerializable opens a pool of cfg whose sessions default to SERIALIZABLE: Oracle
// MySQL names the variable transaction_isolation, MariaDB 10.11 tx_isolation (unknown
// system variable, 1193, tells which).
func openSerializable(cfg *driver.Config) (*sql.DB, error) {
	var err error
	for _, name := range []string{"transaction_isolation", "tx_isolation"} {
		c := cfg.Clone()
		if c.Params == nil {
			c.Params = map[string]string{}
		}
		c.Params[name] = "'SERIALIZABLE'"
		var db *sql.DB
		if db, err = openConfig(c); err != nil {
			return nil, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var level string
		err = db.QueryRowContext(ctx, "SELECT @@SESSION."+name).Scan(&level)
		cancel()
		if err == nil && level == "SERIALIZABLE" {
			return db, nil
		}
		if err == nil {
			_ = db.Close()
			return nil, fmt.Errorf("sessions run at %s, not SERIALIZABLE", level)
		}
		_ = db.Close()
		var me *driver.MySQLError
		if !errors.As(err, &me) || me.Number != 1193 {
			return nil, err
		}
	}
	return nil, err
}

// auditTriggers creates an application's audit on the rows table: one AFTER trigger
// per event (MySQL triggers are FOR EACH ROW only), each inserting a row into audit.
func auditTriggers(ctx context.Context, db *sql.DB, opts outbox.Options, audit string) (func(context.Context) error, error) {
	table := mysql.QualifiedTable(opts, opts.OutboxTable())
	for _, event := range []string{"INSERT", "UPDATE", "DELETE"} {
		name := mysql.QualifiedTable(opts, opts.TablePrefix+"audit_"+strings.ToLower(event))
		if _, err := db.ExecContext(ctx, "CREATE TRIGGER "+name+" AFTER "+event+" ON "+table+
			" FOR EACH ROW INSERT INTO "+audit+" (op) VALUES ('"+event+"')"); err != nil {
			return nil, err
		}
	}
	return nil, nil // dropped with the table
}

func TestConformance(t *testing.T) {
	outboxtest.Run(t, harness(t, plainDSN))
}

// TestConformanceConnector runs the suite over a pool of NewConnector: its connections
// (MultiStatements on, the BEGIN that carries a first statement) keep the whole store
// contract.
func TestConformanceConnector(t *testing.T) {
	if testing.Short() {
		t.Skip("short: the plain DSN run covers the contract")
	}
	h := harness(t, plainDSN)
	c, err := mysql.NewConnector(config(t, plainDSN))
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(c)
	db.SetMaxOpenConns(32)
	db.SetMaxIdleConns(32)
	t.Cleanup(func() { _ = db.Close() })
	h.DB = db
	outboxtest.Run(t, h)
}

// TestConformanceDSNVariant runs the suite again over a DSN with interpolateParams,
// clientFoundRows and parseTime&loc=Local set: the store must not depend on any of them.
func TestConformanceDSNVariant(t *testing.T) {
	if testing.Short() {
		t.Skip("short: the plain DSN run covers the contract")
	}
	outboxtest.Run(t, harness(t, otherDSN))
}

// BenchmarkStore runs the shared store benchmarks (insert-at-commit reports its time
// over the hand-written multi-row INSERT baseline as x-baseline).
func BenchmarkStore(b *testing.B) {
	b.Run("plain", func(b *testing.B) { outboxtest.Bench(b, harness(b, plainDSN)) })
	b.Run("interpolate", func(b *testing.B) { outboxtest.Bench(b, harness(b, otherDSN)) })
}

// rowWhere finds a row by its lane and id through the primary key (lane, seq, id): an
// unordered row's seq is -1; a lane's rows are walked (the suite locks few of them).
func rowWhere(lane int) string {
	if lane == outbox.Unordered {
		return "lane = -1 AND seq = -1 AND id = ?"
	}
	return fmt.Sprintf("lane = %d AND id = ?", lane)
}
