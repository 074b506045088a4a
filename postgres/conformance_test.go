package postgres_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	outbox "github.com/relayer-go/watermill-outbox"

	"github.com/relayer-go/watermill-outbox/internal/testenv"
	"github.com/relayer-go/watermill-outbox/outboxtest"
	"github.com/relayer-go/watermill-outbox/postgres"
)

func harness(t testing.TB) outboxtest.Harness {
	db := openDB(t, "")
	db.SetMaxOpenConns(32)
	db.SetMaxIdleConns(32)
	dsn := testenv.DSN(t, testenv.Postgres)
	return outboxtest.Harness{
		Name: "postgres",
		DB:   db,
		NewStore: func(db *sql.DB, opts outbox.Options) (outbox.Store, error) {
			return postgres.New(db, opts)
		},
		Placeholder:    func(n int) string { return fmt.Sprintf("$%d", n) },
		QualifiedTable: postgres.QualifiedTable,
		CreateFindIndex: func(db *sql.DB, opts outbox.Options) error {
			script, err := postgres.FindIndexScript(opts)
			if err != nil {
				return err
			}
			_, err = db.Exec(script)
			return err
		},
		InvalidPrefixes: []outboxtest.InvalidPrefix{
			{Prefix: strings.Repeat("p", postgres.MaxTablePrefixBytes+1), ErrContains: "TablePrefix"},
			{Prefix: strings.Repeat("é", postgres.MaxTablePrefixBytes/2+1), ErrContains: "bytes"},
		},
		QuotePrefix: `q"x_`,
		OpenInTimeZone: func(tz string) (*sql.DB, error) {
			return openWith(dsn, tz)
		},
		OpenDB:          func() (*sql.DB, error) { return openWith(dsn, "") },
		OpenConnectorDB: func() (*sql.DB, error) { return postgres.OpenDB(dsn) },
		OpenCountingDB:  func(connector bool) (*sql.DB, func() int64, error) { return openCounting(dsn, connector) },
		AuditTriggers:   auditTriggers,
		OpenSerializable: func() (*sql.DB, error) {
			cfg, err := pgx.ParseConfig(dsn)
			if err != nil {
				return nil, err
			}
			cfg.RuntimeParams["default_transaction_isolation"] = "serializable"
			db := stdlib.OpenDB(*cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var level string
			if err := db.QueryRowContext(ctx, "SHOW transaction_isolation").Scan(&level); err != nil || level != "serializable" {
				_ = db.Close()
				return nil, fmt.Errorf("sessions run at %q (%v), not serializable", level, err)
			}
			return db, nil
		},
		MaxParams: 65535,
	}
}

// auditTriggers creates an application's audit on the rows table: a trigger function
// inserting TG_OP into audit, run by an AFTER trigger for each row and by one for each
// statement (which fires also when the statement changes no row).
func auditTriggers(ctx context.Context, db *sql.DB, opts outbox.Options, audit string) (func(context.Context) error, error) {
	table := postgres.QualifiedTable(opts, opts.OutboxTable())
	fn := postgres.QualifiedTable(opts, opts.TablePrefix+"audit_fn")
	stmts := []string{
		"CREATE FUNCTION " + fn + "() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN INSERT INTO " + audit +
			" (op) VALUES (TG_OP); RETURN NULL; END $$",
		`CREATE TRIGGER "` + opts.TablePrefix + `audit_row" AFTER INSERT OR UPDATE OR DELETE ON ` + table +
			" FOR EACH ROW EXECUTE FUNCTION " + fn + "()",
		`CREATE TRIGGER "` + opts.TablePrefix + `audit_statement" AFTER INSERT OR UPDATE OR DELETE ON ` + table +
			" FOR EACH STATEMENT EXECUTE FUNCTION " + fn + "()",
	}
	drop := func(ctx context.Context) error {
		_, err := db.ExecContext(ctx, "DROP FUNCTION IF EXISTS "+fn+"() CASCADE")
		return err
	}
	for _, stmt := range stmts {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			return drop, err
		}
	}
	return drop, nil
}

func TestConformance(t *testing.T) {
	outboxtest.Run(t, harness(t))
}

// TestConformanceConnector runs the suite over a pool of OpenDB (WrapConnector): its
// connections keep the whole store contract.
func TestConformanceConnector(t *testing.T) {
	if testing.Short() {
		t.Skip("short: the stdlib pool's run covers the contract")
	}
	h := harness(t)
	db, err := postgres.OpenDB(testenv.DSN(t, testenv.Postgres))
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(32)
	db.SetMaxIdleConns(32)
	t.Cleanup(func() { _ = db.Close() })
	h.DB = db
	outboxtest.Run(t, h)
}

func BenchmarkStore(b *testing.B) {
	outboxtest.Bench(b, harness(b))
}
