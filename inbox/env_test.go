package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "github.com/microsoft/go-mssqldb"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/internal/testenv"
	"github.com/relayer-go/watermill-outbox/mysql"
	"github.com/relayer-go/watermill-outbox/postgres"
	"github.com/relayer-go/watermill-outbox/publisher"
	"github.com/relayer-go/watermill-outbox/sqlserver"
)

// dialect is what the tests need of one engine; every test runs on each.
type dialect struct {
	name   string // testenv service
	driver string
	store  func(db *sql.DB, opts outbox.Options) (store, error)
	table  func(opts outbox.Options, table string) string
	ph     func(n int) string
}

// store is a dialect's store: the outbox and the inbox capability.
type store interface {
	outbox.Store
	outbox.Inbox
}

var dialects = []*dialect{
	{
		name: testenv.MySQL, driver: "mysql",
		store: func(db *sql.DB, o outbox.Options) (store, error) { return mysql.New(db, o) },
		table: mysql.QualifiedTable, ph: func(int) string { return "?" },
	},
	{
		name: testenv.Postgres, driver: "pgx",
		store: func(db *sql.DB, o outbox.Options) (store, error) { return postgres.New(db, o) },
		table: postgres.QualifiedTable, ph: func(n int) string { return "$" + strconv.Itoa(n) },
	},
	{
		name: testenv.SQLServer, driver: "sqlserver",
		store: func(db *sql.DB, o outbox.Options) (store, error) {
			return sqlserver.New(db, o)
		},
		table: sqlserver.QualifiedTable, ph: func(n int) string { return "@p" + strconv.Itoa(n) },
	},
}

var (
	dbsMu sync.Mutex
	dbs   = map[string]*sql.DB{}
)

// sharedDB opens one pool per dialect for the test binary.
func sharedDB(t testing.TB, d *dialect) *sql.DB {
	t.Helper()
	dsn := testenv.DSN(t, d.name)
	dbsMu.Lock()
	defer dbsMu.Unlock()
	if db, ok := dbs[d.name]; ok {
		return db
	}
	db, err := sql.Open(d.driver, dsn)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = db.PingContext(ctx)
		cancel()
	}
	if err != nil {
		testenv.Unavailable(t, d.name, err)
	}
	db.SetMaxOpenConns(40)
	db.SetMaxIdleConns(40)
	dbs[d.name] = db
	return db
}

// env is one test's tables on one engine, with an effects table: one row per
// application of a message (deliberately not unique: the test counts applications).
type env struct {
	d       *dialect
	db      *sql.DB
	opts    outbox.Options
	store   store
	out     *publisher.Outbox
	effects string // quoted, qualified
}

func eachDialect(t *testing.T, fn func(t *testing.T, e *env)) {
	t.Helper()
	for _, d := range dialects {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			fn(t, newEnv(t, d))
		})
	}
}

func newEnv(t testing.TB, d *dialect) *env {
	t.Helper()
	db := sharedDB(t, d)
	opts := outbox.Options{TablePrefix: testenv.Prefix(t)}
	s, err := d.store(db, opts)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{d: d, db: db, opts: s.Options(), store: s, effects: d.table(opts, opts.TablePrefix+"effects")}
	testenv.Cleanup(t, "drop the test's tables", func(ctx context.Context) error {
		var errs []error
		for _, tb := range append(opts.TableNames(), opts.TablePrefix+"effects") {
			if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+d.table(opts, tb)); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	})
	ctx := context.Background()
	if err := s.CreateSchema(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE "+e.effects+" (message_uuid VARCHAR(64) NOT NULL, note VARCHAR(64) NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	if e.out, err = publisher.New(s, publisher.Config{}, nil); err != nil {
		t.Fatal(err)
	}
	return e
}

// applyEffect is the business write of the tests' handlers.
func (e *env) applyEffect(ctx context.Context, tx *sql.Tx, uuid string) error {
	_, err := tx.ExecContext(ctx, fmt.Sprintf("INSERT INTO %s (message_uuid, note) VALUES (%s, %s)", e.effects, e.d.ph(1), e.d.ph(2)), uuid, "applied")
	return err
}

func (e *env) count(t testing.TB, query string) int {
	t.Helper()
	var n int
	if err := e.db.QueryRow(query).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// checkApplications fails t unless each of want UUIDs was applied exactly once and
// nothing else was applied.
func (e *env) checkApplications(t testing.TB, want int) {
	t.Helper()
	total := e.count(t, "SELECT COUNT(*) FROM "+e.effects)
	distinct := e.count(t, "SELECT COUNT(DISTINCT message_uuid) FROM "+e.effects)
	if total != want || distinct != want {
		t.Fatalf("%d applications of %d distinct messages; want %d, each once", total, distinct, want)
	}
}

func (e *env) outboxRows(t testing.TB) int {
	return e.count(t, "SELECT COUNT(*) FROM "+e.d.table(e.opts, e.opts.OutboxTable()))
}

func (e *env) inboxRows(t testing.TB) int {
	return e.count(t, "SELECT COUNT(*) FROM "+e.d.table(e.opts, e.opts.InboxTable()))
}
