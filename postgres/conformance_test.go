package postgres_test

import (
	"database/sql"
	"fmt"
	"strings"
	"testing"

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
		MaxParams:       65535,
	}
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
