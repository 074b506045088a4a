package e2e_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/internal/testenv"
	"github.com/relayer-go/watermill-outbox/mysql"
	"github.com/relayer-go/watermill-outbox/postgres"
)

// dialect is one engine the tests run on.
type dialect struct {
	name, driver string
	store        func(*sql.DB, outbox.Options) (outbox.Store, error)
	table        func(outbox.Options, string) string
	ph           func(int) string
}

var dialects = []dialect{
	{
		name: testenv.MySQL, driver: "mysql",
		store: func(db *sql.DB, o outbox.Options) (outbox.Store, error) { return mysql.New(db, o) },
		table: mysql.QualifiedTable, ph: func(int) string { return "?" },
	},
	{
		name: testenv.Postgres, driver: "pgx",
		store: func(db *sql.DB, o outbox.Options) (outbox.Store, error) { return postgres.New(db, o) },
		table: postgres.QualifiedTable, ph: func(i int) string { return fmt.Sprintf("$%d", i) },
	},
}

// env is one test's outbox on one engine: fresh tables and a business table "orders".
type env struct {
	d      dialect
	db     *sql.DB
	store  outbox.Store
	orders string // quoted, qualified
	outbox string // quoted, qualified
}

// eachDialect runs fn as a parallel subtest per engine, with fresh tables.
func eachDialect(t *testing.T, fn func(t *testing.T, e *env)) {
	for _, d := range dialects {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			fn(t, newEnv(t, d))
		})
	}
}

func newEnv(t *testing.T, d dialect) *env {
	t.Helper()
	db, err := sql.Open(d.driver, testenv.DSN(t, d.name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		testenv.Unavailable(t, d.name, err)
	}
	opts := outbox.Options{TablePrefix: testenv.Prefix(t), Lanes: 8}
	store, err := d.store(db, opts)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{d: d, db: db, store: store, orders: d.table(opts, opts.TablePrefix+"orders"), outbox: d.table(opts, opts.OutboxTable())}
	testenv.Cleanup(t, "drop the test's tables", func(ctx context.Context) error {
		var errs []error
		for _, tb := range append(opts.TableNames(), opts.TablePrefix+"orders") {
			if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+d.table(opts, tb)); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	})
	if err := store.CreateSchema(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE "+e.orders+" (id BIGINT NOT NULL PRIMARY KEY, note VARCHAR(200) NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *env) insertOrder(ctx context.Context, tx *sql.Tx, id int, note string) error {
	_, err := tx.ExecContext(ctx, fmt.Sprintf("INSERT INTO %s (id, note) VALUES (%s, %s)", e.orders, e.d.ph(1), e.d.ph(2)), id, note)
	return err
}

func (e *env) count(t testing.TB, table string) int {
	t.Helper()
	var n int
	if err := e.db.QueryRow("SELECT COUNT(*) FROM " + table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// ids returns the first column of query's rows as ints.
func (e *env) ids(t testing.TB, query string) []int {
	t.Helper()
	var out []int
	for _, s := range e.strings(t, query) {
		var n int
		fmt.Sscan(s, &n)
		out = append(out, n)
	}
	return out
}

// strings returns the first column of query's rows as strings.
func (e *env) strings(t testing.TB, query string) []string {
	t.Helper()
	rows, err := e.db.Query(query)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s []byte
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, string(s))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
