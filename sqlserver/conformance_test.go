package sqlserver_test

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
	"testing"
	"time"

	_ "github.com/microsoft/go-mssqldb"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/internal/testenv"
	"github.com/relayer-go/watermill-outbox/outboxtest"
	"github.com/relayer-go/watermill-outbox/sqlserver"
)

// harness builds the conformance harness over OUTBOX_TEST_SQLSERVER_DSN (a go-mssqldb
// URL such as sqlserver://sa:PASSWORD@127.0.0.1:1433?database=outbox). Without it the
// test skips, or fails when OUTBOX_TEST_REQUIRE names sqlserver.
func harness(t testing.TB) outboxtest.Harness {
	dsn := testenv.DSN(t, testenv.SQLServer)
	open := func() (*sql.DB, error) { return sql.Open("sqlserver", dsn) }
	db, err := open()
	if err != nil {
		t.Fatalf("open %s: %v", testenv.EnvVar(testenv.SQLServer), err)
	}
	t.Cleanup(func() { _ = db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		testenv.Unavailable(t, testenv.SQLServer, err)
	}
	return outboxtest.Harness{
		Name: "sqlserver",
		DB:   db,
		NewStore: func(db *sql.DB, opts outbox.Options) (outbox.Store, error) {
			return sqlserver.New(db, opts)
		},
		Placeholder:    func(n int) string { return "@p" + strconv.Itoa(n) },
		QualifiedTable: sqlserver.QualifiedTable,
		CreateFindIndex: func(db *sql.DB, opts outbox.Options) error {
			script, err := sqlserver.FindIndexScript(opts)
			if err != nil {
				return err
			}
			for _, st := range strings.Split(strings.TrimSpace(script), "\n\n") {
				if _, err := db.Exec(st); err != nil {
					return err
				}
			}
			return nil
		},
		InvalidPrefixes: []outboxtest.InvalidPrefix{
			{Prefix: strings.Repeat("p", sqlserver.MaxTablePrefixUnits+1), ErrContains: "TablePrefix"},
			// 54 supplementary characters are 108 UTF-16 code units: too long, although
			// only 54 characters.
			{Prefix: strings.Repeat("\U0001F600", sqlserver.MaxTablePrefixUnits/2+1), ErrContains: "UTF-16 code units"},
		},
		QuotePrefix: "q]'[x_",
		OpenDB:      open,
		MaxParams:   2000,
	}
}

func TestConformance(t *testing.T) {
	outboxtest.Run(t, harness(t))
}

func BenchmarkStore(b *testing.B) {
	outboxtest.Bench(b, harness(b))
}
