// Package inboxtest is the test environment of the inbox's tests, shared by package
// inbox's own tests and the crash tests in module e2e (e2e/inboxcrash): one pool per
// engine, fresh tables per test (outbox, inbox, and an effects table that counts
// applications), and the checks on them.
package inboxtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	_ "github.com/go-sql-driver/mysql"  // the MySQL dialect's driver
	_ "github.com/jackc/pgx/v5/stdlib"  // the PostgreSQL dialect's driver
	_ "github.com/microsoft/go-mssqldb" // the SQL Server dialect's driver

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/inbox"
	"github.com/relayer-go/watermill-outbox/internal/testenv"
	"github.com/relayer-go/watermill-outbox/mysql"
	"github.com/relayer-go/watermill-outbox/postgres"
	"github.com/relayer-go/watermill-outbox/publisher"
	"github.com/relayer-go/watermill-outbox/sqlserver"
)

// Dialect is what the tests need of one engine; every test runs on each.
type Dialect struct {
	Name   string // testenv service
	Driver string
	// OpenDB opens a pool through the dialect's connector, which sends the inbox record
	// in the round trip of the BEGIN (nil: the dialect has none; Fused tests then use
	// the plain driver's pool).
	OpenDB func(dsn string) (*sql.DB, error)
	Store  func(db *sql.DB, opts outbox.Options) (Store, error)
	Table  func(opts outbox.Options, table string) string
	Ph     func(n int) string
}

// Wiring is how a test's handlers reach the inbox.
type Wiring int

const (
	// Separate: publisher's Middleware around the inbox's Middleware, on a pool of the
	// plain driver (the record is the statement after the BEGIN).
	Separate Wiring = iota
	// Fused: Inbox.OutboxMiddleware on a pool opened through the dialect's connector
	// (Dialect.OpenDB): the record travels with the BEGIN.
	Fused
)

// Wirings are both wirings; EachDialect runs every test under each.
var Wirings = []Wiring{Separate, Fused}

func (w Wiring) String() string {
	if w == Fused {
		return "fused"
	}
	return "separate"
}

// Store is a dialect's store: the outbox and the inbox capability.
type Store interface {
	outbox.Store
	outbox.Inbox
}

// Dialects are the engines: MariaDB/MySQL, PostgreSQL, SQL Server.
var Dialects = []*Dialect{
	{
		Name: testenv.MySQL, Driver: "mysql", OpenDB: mysql.OpenDB,
		Store: func(db *sql.DB, o outbox.Options) (Store, error) { return mysql.New(db, o) },
		Table: mysql.QualifiedTable, Ph: func(int) string { return "?" },
	},
	{
		Name: testenv.Postgres, Driver: "pgx",
		OpenDB: func(dsn string) (*sql.DB, error) { return postgres.OpenDB(dsn) },
		Store:  func(db *sql.DB, o outbox.Options) (Store, error) { return postgres.New(db, o) },
		Table:  postgres.QualifiedTable, Ph: func(n int) string { return "$" + strconv.Itoa(n) },
	},
	{
		Name: testenv.SQLServer, Driver: "sqlserver",
		Store: func(db *sql.DB, o outbox.Options) (Store, error) {
			return sqlserver.New(db, o)
		},
		Table: sqlserver.QualifiedTable, Ph: func(n int) string { return "@p" + strconv.Itoa(n) },
	},
}

var (
	dbsMu sync.Mutex
	dbs   = map[string]*sql.DB{}
)

// SharedDB opens one pool per dialect for the test binary (Separate's).
func SharedDB(t testing.TB, d *Dialect) *sql.DB { return SharedDBWired(t, d, Separate) }

// SharedDBWired opens one pool per dialect and wiring for the test binary: Fused's
// through the dialect's connector.
func SharedDBWired(t testing.TB, d *Dialect, w Wiring) *sql.DB {
	t.Helper()
	dsn := testenv.DSN(t, d.Name)
	dbsMu.Lock()
	defer dbsMu.Unlock()
	key := d.Name + "/" + w.String()
	if db, ok := dbs[key]; ok {
		return db
	}
	open := func(dsn string) (*sql.DB, error) { return sql.Open(d.Driver, dsn) }
	if w == Fused && d.OpenDB != nil {
		open = d.OpenDB
	}
	db, err := open(dsn)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = db.PingContext(ctx)
		cancel()
	}
	if err != nil {
		testenv.Unavailable(t, d.Name, err)
	}
	db.SetMaxOpenConns(40)
	db.SetMaxIdleConns(40)
	dbs[key] = db
	return db
}

// Env is one test's tables on one engine, with an effects table: one row per
// application of a message (deliberately not unique: the test counts applications).
type Env struct {
	D       *Dialect
	DB      *sql.DB
	Opts    outbox.Options
	Store   Store
	Out     *publisher.Outbox
	Effects string // quoted, qualified
	Wiring  Wiring
}

// EachDialect runs fn as a parallel subtest per engine and wiring, with fresh tables.
func EachDialect(t *testing.T, fn func(t *testing.T, e *Env)) {
	t.Helper()
	for _, w := range Wirings {
		EachDialectWired(t, w, fn)
	}
}

// EachDialectWired runs fn as a parallel subtest per engine under wiring w, with fresh
// tables.
func EachDialectWired(t *testing.T, w Wiring, fn func(t *testing.T, e *Env)) {
	t.Helper()
	for _, d := range Dialects {
		t.Run(d.Name+"/"+w.String(), func(t *testing.T) {
			t.Parallel()
			fn(t, NewEnvWired(t, d, w))
		})
	}
}

// NewEnv creates fresh tables (outbox, inbox, effects) on d, wired Separate.
func NewEnv(t testing.TB, d *Dialect) *Env { return NewEnvWired(t, d, Separate) }

// NewEnvWired creates fresh tables (outbox, inbox, effects) on d's pool for wiring w.
func NewEnvWired(t testing.TB, d *Dialect, w Wiring) *Env {
	t.Helper()
	db := SharedDBWired(t, d, w)
	opts := outbox.Options{TablePrefix: testenv.Prefix(t)}
	s, err := d.Store(db, opts)
	if err != nil {
		t.Fatal(err)
	}
	e := &Env{D: d, DB: db, Opts: s.Options(), Store: s, Effects: d.Table(opts, opts.TablePrefix+"effects"), Wiring: w}
	testenv.Cleanup(t, "drop the test's tables", func(ctx context.Context) error {
		var errs []error
		for _, tb := range append(opts.TableNames(), opts.TablePrefix+"effects") {
			if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+d.Table(opts, tb)); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	})
	ctx := context.Background()
	if err := s.CreateSchema(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE "+e.Effects+" (message_uuid VARCHAR(64) NOT NULL, note VARCHAR(64) NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	if e.Out, err = publisher.New(s, publisher.Config{}, nil); err != nil {
		t.Fatal(err)
	}
	return e
}

// ApplyEffect is the business write of the tests' handlers.
func (e *Env) ApplyEffect(ctx context.Context, tx *sql.Tx, uuid string) error {
	_, err := tx.ExecContext(ctx, fmt.Sprintf("INSERT INTO %s (message_uuid, note) VALUES (%s, %s)", e.Effects, e.D.Ph(1), e.D.Ph(2)), uuid, "applied")
	return err
}

// Count runs a COUNT query.
func (e *Env) Count(t testing.TB, query string) int {
	t.Helper()
	var n int
	if err := e.DB.QueryRow(query).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// CheckApplications fails t unless each of want UUIDs was applied exactly once and
// nothing else was applied.
func (e *Env) CheckApplications(t testing.TB, want int) {
	t.Helper()
	total := e.Count(t, "SELECT COUNT(*) FROM "+e.Effects)
	distinct := e.Count(t, "SELECT COUNT(DISTINCT message_uuid) FROM "+e.Effects)
	if total != want || distinct != want {
		t.Fatalf("%d applications of %d distinct messages; want %d, each once", total, distinct, want)
	}
}

// OutboxRows counts the outbox rows.
func (e *Env) OutboxRows(t testing.TB) int {
	return e.Count(t, "SELECT COUNT(*) FROM "+e.D.Table(e.Opts, e.Opts.OutboxTable()))
}

// InboxRows counts the inbox entries.
func (e *Env) InboxRows(t testing.TB) int {
	return e.Count(t, "SELECT COUNT(*) FROM "+e.D.Table(e.Opts, e.Opts.InboxTable()))
}

// NewInbox builds an inbox over the env's store (consumer "billing" unless cfg names one).
func (e *Env) NewInbox(t testing.TB, cfg inbox.Config) *inbox.Inbox {
	t.Helper()
	if cfg.Consumer == nil {
		cfg.Consumer = inbox.ConsumerName("billing")
	}
	in, err := inbox.New(e.Store, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// Middleware is the router middleware of the env's wiring, outermost first:
// e.Out.Middleware() and in.Middleware() (Separate), or in.OutboxMiddleware(e.Out)
// (Fused).
func (e *Env) Middleware(in *inbox.Inbox) []message.HandlerMiddleware {
	if e.Wiring == Fused {
		return []message.HandlerMiddleware{in.OutboxMiddleware(e.Out)}
	}
	return []message.HandlerMiddleware{e.Out.Middleware(), in.Middleware()}
}

// Chain wraps h as a router would with the env's Middleware.
func (e *Env) Chain(in *inbox.Inbox, h message.HandlerFunc) message.HandlerFunc {
	mws := e.Middleware(in)
	for i := len(mws) - 1; i >= 0; i-- {
		h = mws[i](h)
	}
	return h
}

// ParseWiring reads a Wiring's String.
func ParseWiring(s string) (Wiring, error) {
	for _, w := range Wirings {
		if w.String() == s {
			return w, nil
		}
	}
	return Separate, fmt.Errorf("inboxtest: unknown wiring %q", s)
}
