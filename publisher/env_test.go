package publisher_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/internal/testenv"
	"github.com/relayer-go/watermill-outbox/publisher"
)

// dialect is what the tests need to know about one SQL engine. Each dialect's test
// file registers one; every test runs against all of them.
type dialect struct {
	name   string // testenv service name
	driver string
	dsn    func(testing.TB) string
	open   func(dsn string) (*sql.DB, error)
	store  func(db *sql.DB, opts outbox.Options) (outbox.Store, error)
	table  func(opts outbox.Options, table string) string // quoted, qualified
	ph     func(n int) string
	connID string // SELECT returning the session id
	// kill returns the statement (and its arguments) that kills session id from another
	// session. MySQL refuses KILL as a prepared statement, so its id goes in the text.
	kill func(id int64) (string, []any)
}

var dialects []*dialect

var (
	dbsMu sync.Mutex
	dbs   = map[string]*sql.DB{}
)

// sharedDB opens one pool per dialect for the whole test binary (tests use their own
// table prefixes, so they share the pool safely).
func sharedDB(t testing.TB, d *dialect) *sql.DB {
	t.Helper()
	dsn := d.dsn(t)
	dbsMu.Lock()
	defer dbsMu.Unlock()
	if db, ok := dbs[d.name]; ok {
		return db
	}
	db, err := d.open(dsn)
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

// env is one test's outbox on one engine: its own tables (fresh prefix), a business
// table "<prefix>orders", and a store.
type env struct {
	d      *dialect
	db     *sql.DB
	opts   outbox.Options
	store  outbox.Store
	orders string // quoted, qualified business table
	outbox string // quoted, qualified outbox table
}

// eachDialect runs fn as a parallel subtest per registered dialect, with fresh tables.
func eachDialect(t *testing.T, lanes int, fn func(t *testing.T, e *env)) {
	t.Helper()
	if len(dialects) == 0 {
		t.Fatal("no dialect registered")
	}
	for _, d := range dialects {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			fn(t, newEnv(t, d, lanes))
		})
	}
}

func newEnv(t testing.TB, d *dialect, lanes int) *env {
	t.Helper()
	db := sharedDB(t, d)
	opts := outbox.Options{TablePrefix: testenv.Prefix(t), Lanes: lanes}
	store, err := d.store(db, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	e := &env{d: d, db: db, opts: store.Options(), store: store,
		orders: d.table(opts, opts.TablePrefix+"orders"), outbox: d.table(opts, opts.OutboxTable())}
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

func (e *env) newOutbox(t testing.TB, cfg publisher.Config) *publisher.Outbox {
	t.Helper()
	ob, err := publisher.New(e.store, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return ob
}

// insertOrder is the business write.
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

// farFuture makes every row due for Read.
var farFuture = time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)

// readAll returns every pending row through the store, unordered rows first, then
// lane by lane, each in id order.
func (e *env) readAll(t testing.TB) []outbox.Record {
	t.Helper()
	var all []outbox.Record
	for lane := outbox.Unordered; lane < e.opts.Lanes; lane++ {
		var after outbox.ID
		for {
			page, err := e.store.Read(context.Background(), outbox.ReadQuery{Lane: lane, After: after, Now: farFuture}, make([]outbox.Record, 500))
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, page...)
			if len(page) < 500 {
				break
			}
			after = page[len(page)-1].ID
		}
	}
	return all
}

// sessionID returns the database session id of tx's connection.
func (e *env) sessionID(t testing.TB, tx *sql.Tx) int64 {
	t.Helper()
	var id int64
	if err := tx.QueryRow(e.d.connID).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}
