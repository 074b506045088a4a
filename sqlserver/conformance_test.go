package sqlserver_test

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	mssql "github.com/microsoft/go-mssqldb"

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
		QuotePrefix:   "q]'[x_",
		OpenDB:        open,
		AuditTriggers: auditTriggers,
		OpenSerializable: func() (*sql.DB, error) {
			c, err := mssql.NewConnector(dsn)
			if err != nil {
				return nil, err
			}
			c.SessionInitSQL = "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE"
			db := sql.OpenDB(c)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var level int16 // sys.dm_exec_sessions: 4 is SERIALIZABLE
			err = db.QueryRowContext(ctx, "SELECT transaction_isolation_level FROM sys.dm_exec_sessions WHERE session_id = @@SPID").Scan(&level)
			if err != nil || level != 4 {
				_ = db.Close()
				return nil, fmt.Errorf("sessions run at isolation level %d (%v), not SERIALIZABLE (4)", level, err)
			}
			return db, nil
		},
		MaxParams: 2000,
	}
}

// auditTriggers creates an application's audit on the rows table: one AFTER INSERT,
// UPDATE, DELETE trigger writing a row per inserted and per deleted row and one per
// statement (a trigger fires once per statement, also when it changes no row), with
// NOCOUNT off so that its counts reach the client as the statement's would.
func auditTriggers(ctx context.Context, db *sql.DB, opts outbox.Options, audit string) (func(context.Context) error, error) {
	_, err := db.ExecContext(ctx, "CREATE TRIGGER "+sqlserver.QualifiedTable(opts, opts.TablePrefix+"audit_tr")+
		" ON "+sqlserver.QualifiedTable(opts, opts.OutboxTable())+" AFTER INSERT, UPDATE, DELETE AS\nBEGIN\n"+
		"    SET NOCOUNT OFF;\n"+
		"    INSERT INTO "+audit+" (op) SELECT 'INSERTED' FROM inserted;\n"+
		"    INSERT INTO "+audit+" (op) SELECT 'DELETED' FROM deleted;\n"+
		"    INSERT INTO "+audit+" (op) VALUES ('STATEMENT');\n"+
		"END;")
	return nil, err // dropped with the table
}

func TestConformance(t *testing.T) {
	outboxtest.Run(t, harness(t))
}

func BenchmarkStore(b *testing.B) {
	outboxtest.Bench(b, harness(b))
}
