package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	_ "github.com/go-sql-driver/mysql" // the MariaDB engine's driver
	_ "github.com/jackc/pgx/v5/stdlib" // the PostgreSQL engine's driver

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/forwarder"
	"github.com/relayer-go/watermill-outbox/internal/testenv"
	"github.com/relayer-go/watermill-outbox/mysql"
	"github.com/relayer-go/watermill-outbox/postgres"
	"github.com/relayer-go/watermill-outbox/publisher"
)

// The end-to-end tests' engines, writers and checks, shared by the forwarder's tests
// (root module) and the broker tests (module e2e).

// FullRun reports whether the heavy variants run (make chaos / OUTBOX_TEST_FULL=1).
func FullRun() bool { return os.Getenv("OUTBOX_TEST_FULL") == "1" }

// Engine is one SQL dialect the end-to-end tests run against.
type Engine struct {
	Name     string
	Service  string // testenv service
	Driver   string
	NewStore func(db *sql.DB, opts outbox.Options) (outbox.Store, error)
	Qualify  func(opts outbox.Options, table string) string
}

var (
	MariaDB = Engine{
		Name: "mariadb", Service: testenv.MySQL, Driver: "mysql",
		NewStore: func(db *sql.DB, o outbox.Options) (outbox.Store, error) { return mysql.New(db, o) },
		Qualify:  mysql.QualifiedTable,
	}
	PostgreSQL = Engine{
		Name: "postgres", Service: testenv.Postgres, Driver: "pgx",
		NewStore: func(db *sql.DB, o outbox.Options) (outbox.Store, error) { return postgres.New(db, o) },
		Qualify:  postgres.QualifiedTable,
	}
	Engines = []Engine{MariaDB, PostgreSQL}
)

// Open returns a pool on the engine's test server (closed at the end of the test).
func (e Engine) Open(t testing.TB) (*sql.DB, string) {
	t.Helper()
	dsn := testenv.DSN(t, e.Service)
	db := e.OpenDSN(t, dsn)
	return db, dsn
}

// OpenDSN is Open on another DSN of the same server (a user of the test's own).
func (e Engine) OpenDSN(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(e.Driver, dsn)
	if err != nil {
		t.Fatalf("open %s: %v", e.Name, err)
	}
	db.SetMaxOpenConns(40)
	db.SetMaxIdleConns(40)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		testenv.Unavailable(t, e.Service, err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// Table creates a fresh outbox (its five tables, with a private prefix) and drops it at the
// end of the test through cleanupDB (a pool that outlives chaos done to db).
func (e Engine) Table(t testing.TB, db *sql.DB, lanes int) outbox.Store {
	t.Helper()
	opts := outbox.Options{TablePrefix: testenv.Prefix(t), Lanes: lanes}
	st, err := e.NewStore(db, opts)
	if err != nil {
		t.Fatalf("%s store: %v", e.Name, err)
	}
	if err := st.CreateSchema(context.Background()); err != nil {
		t.Fatalf("%s schema: %v", e.Name, err)
	}
	testenv.Cleanup(t, "drop the test's tables", func(ctx context.Context) error { return e.Drop(ctx, db, opts) })
	return st
}

// Drop drops the tables of opts.
func (e Engine) Drop(ctx context.Context, db *sql.DB, opts outbox.Options) error {
	var errs []error
	for _, tb := range opts.TableNames() {
		if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+e.Qualify(opts, tb)); err != nil {
			errs = append(errs, fmt.Errorf("drop %s: %w", tb, err))
		}
	}
	return errors.Join(errs...)
}

// RowCount counts every row left in the outbox table (pending or parked).
func (e Engine) RowCount(t testing.TB, db *sql.DB, opts outbox.Options) int {
	t.Helper()
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM " + e.Qualify(opts, opts.OutboxTable())).Scan(&n); err != nil {
		t.Fatalf("count rows: %v", err)
	}
	return n
}

// WaitEmpty fails the test unless the outbox table becomes empty within d (acks are
// completed in batches, shortly after the publish).
func (e Engine) WaitEmpty(t testing.TB, db *sql.DB, opts outbox.Options, d time.Duration) {
	t.Helper()
	end := time.Now().Add(d)
	for {
		n := e.RowCount(t, db, opts)
		if n == 0 {
			return
		}
		if time.Now().After(end) {
			t.Errorf("%d rows left in the outbox %s after delivery", n, d)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// KeyedMessages returns n messages spread round-robin over keys ordering keys; message i
// has key "k<i%keys>" and sequence i/keys within its key. keys == 0 gives unordered
// messages (no ordering key).
func KeyedMessages(n, keys int, topic string) []*message.Message {
	msgs := make([]*message.Message, n)
	for i := range msgs {
		m := message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprintf(`{"n":%d,"topic":%q}`, i, topic)))
		if keys > 0 {
			k := "k" + strconv.Itoa(i%keys)
			m.Metadata.Set(publisher.MetadataOrderingKey, k)
			m.Metadata.Set(KeyMetadata, k)
			m.Metadata.Set(SeqMetadata, strconv.Itoa(i/keys))
		}
		m.Metadata.Set("test_index", strconv.Itoa(i))
		msgs[i] = m
	}
	return msgs
}

// UUIDsOf returns the UUIDs of msgs.
func UUIDsOf(msgs []*message.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.UUID
	}
	return out
}

// WriteStats reports what writers did beyond the happy path.
type WriteStats struct {
	mu             sync.Mutex
	Retries        int // transactions retried after an error
	UnknownRetried int // messages rewritten after a commit with unknown outcome (may be duplicate rows)
}

// WriteAll publishes msgs to topic through ob with `writers` concurrent writers, each
// committing `batch` messages per transaction. Messages of one ordering key always go to
// the same writer, in order, so per-key order is the write order. A failed transaction
// is retried (after a commit with an unknown outcome the retry may duplicate rows: the
// consumer sees a duplicate, as it would in production). It gives up after deadline.
func WriteAll(ctx context.Context, ob *publisher.Outbox, db *sql.DB, topic string, msgs []*message.Message, writers, batch int) (*WriteStats, error) {
	ws := &WriteStats{}
	parts := make([][]*message.Message, writers)
	for i, m := range msgs {
		w := i % writers
		if k := m.Metadata.Get(publisher.MetadataOrderingKey); k != "" {
			n, _ := strconv.Atoi(k[1:])
			w = n % writers
		}
		parts[w] = append(parts[w], m)
	}
	errs := make(chan error, writers)
	var wg sync.WaitGroup
	for _, part := range parts {
		wg.Add(1)
		go func(part []*message.Message) {
			defer wg.Done()
			for len(part) > 0 {
				n := min(batch, len(part))
				if err := writeBatch(ctx, ob, db, topic, part[:n], ws); err != nil {
					errs <- err
					return
				}
				part = part[n:]
			}
		}(part)
	}
	wg.Wait()
	close(errs)
	return ws, errors.Join(func() []error {
		var out []error
		for e := range errs {
			out = append(out, e)
		}
		return out
	}()...)
}

func writeBatch(ctx context.Context, ob *publisher.Outbox, db *sql.DB, topic string, msgs []*message.Message, ws *WriteStats) error {
	var last error
	for attempt := 0; attempt < 200; attempt++ {
		if ctx.Err() != nil {
			return fmt.Errorf("write: %w (last error: %v)", ctx.Err(), last)
		}
		if attempt > 0 {
			ws.mu.Lock()
			ws.Retries++
			ws.mu.Unlock()
			time.Sleep(time.Duration(min(attempt, 10)) * 20 * time.Millisecond)
		}
		tx, err := ob.Begin(ctx)
		if err != nil {
			last = err
			continue
		}
		if err := tx.Publish(topic, msgs...); err != nil {
			_ = tx.Rollback()
			return fmt.Errorf("publish into the outbox: %w", err) // not transient
		}
		err = tx.Commit(ctx)
		if err == nil {
			return nil
		}
		last = err
		if errors.Is(err, outbox.ErrUnknownOutcome) {
			ws.mu.Lock()
			ws.UnknownRetried += len(msgs)
			ws.mu.Unlock()
		}
	}
	return fmt.Errorf("write: giving up: %w", last)
}

// RunForwarder runs fwd in a router of its own until the test ends (or stop is called)
// and returns stop, which shuts it down gracefully and waits.
func RunForwarder(t testing.TB, fwd *forwarder.Forwarder) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fwd.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil && !errors.Is(err, context.Canceled) {
					t.Errorf("forwarder run: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Errorf("forwarder did not stop within 30s")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// NewForwarder builds a forwarder with test-friendly timings over store.
func NewForwarder(t testing.TB, store outbox.Store, targets forwarder.Targets, cfg forwarder.Config) *forwarder.Forwarder {
	t.Helper()
	fwd, err := forwarder.New(store, targets, cfg, watermill.NopLogger{})
	if err != nil {
		t.Fatalf("forwarder.New: %v", err)
	}
	return fwd
}

// CheckDelivered fails the test when a message of want was not delivered or per-key
// order was violated, and logs the duplicate count.
func CheckDelivered(t testing.TB, rec *Recorder, want []string) Summary {
	t.Helper()
	s := rec.Summary()
	t.Logf("delivery: %v", s)
	if missing := rec.Missing(want); len(missing) > 0 {
		t.Errorf("%d of %d messages never delivered (first: %v)", len(missing), len(want), missing[:min(5, len(missing))])
	}
	if len(s.Violations) > 0 {
		t.Errorf("%d per-key order violations: %v", len(s.Violations), s.Violations[:min(10, len(s.Violations))])
	}
	return s
}

// RunRouter runs router until the test ends (its cleanup waits at most 30 s for the
// router to stop) and returns once the router runs.
func RunRouter(t testing.TB, router *message.Router) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- router.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("router: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("router did not stop within 30 s")
		}
	})
	select {
	case <-router.Running():
	case <-time.After(30 * time.Second):
		t.Fatal("router not running after 30 s")
	}
}

// WaitFor polls cond every 10 ms until it holds, and fails the test when d passes first.
func WaitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
