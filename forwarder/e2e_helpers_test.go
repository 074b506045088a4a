package forwarder_test

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
	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/forwarder"
	"github.com/relayer-go/watermill-outbox/forwarder/internal/chaos"
	"github.com/relayer-go/watermill-outbox/internal/testenv"
	"github.com/relayer-go/watermill-outbox/mysql"
	"github.com/relayer-go/watermill-outbox/postgres"
	"github.com/relayer-go/watermill-outbox/publisher"
)

// fullRun reports whether the heavy variants run (make chaos / OUTBOX_TEST_FULL=1).
func fullRun() bool { return os.Getenv("OUTBOX_TEST_FULL") == "1" }

// engine is one SQL dialect the end-to-end tests run against.
type engine struct {
	name     string
	service  string // testenv service
	driver   string
	newStore func(db *sql.DB, opts outbox.Options) (outbox.Store, error)
	qualify  func(opts outbox.Options, table string) string
}

var (
	mariaDB = engine{
		name: "mariadb", service: testenv.MySQL, driver: "mysql",
		newStore: func(db *sql.DB, o outbox.Options) (outbox.Store, error) { return mysql.New(db, o) },
		qualify:  mysql.QualifiedTable,
	}
	postgreSQL = engine{
		name: "postgres", service: testenv.Postgres, driver: "pgx",
		newStore: func(db *sql.DB, o outbox.Options) (outbox.Store, error) { return postgres.New(db, o) },
		qualify:  postgres.QualifiedTable,
	}
	engines = []engine{mariaDB, postgreSQL}
)

// open returns a pool on the engine's test server (closed at the end of the test).
func (e engine) open(t testing.TB) (*sql.DB, string) {
	t.Helper()
	dsn := testenv.DSN(t, e.service)
	db := e.openDSN(t, dsn)
	return db, dsn
}

func (e engine) openDSN(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(e.driver, dsn)
	if err != nil {
		t.Fatalf("open %s: %v", e.name, err)
	}
	db.SetMaxOpenConns(40)
	db.SetMaxIdleConns(40)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		testenv.Unavailable(t, e.service, err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// table creates a fresh outbox (three tables with a private prefix) and drops it at the
// end of the test through cleanupDB (a pool that outlives chaos done to db).
func (e engine) table(t testing.TB, db *sql.DB, lanes int) outbox.Store {
	t.Helper()
	opts := outbox.Options{TablePrefix: testenv.Prefix(t), Lanes: lanes}
	st, err := e.newStore(db, opts)
	if err != nil {
		t.Fatalf("%s store: %v", e.name, err)
	}
	if err := st.CreateSchema(context.Background()); err != nil {
		t.Fatalf("%s schema: %v", e.name, err)
	}
	testenv.Cleanup(t, "drop the test's tables", func(ctx context.Context) error { return e.drop(ctx, db, opts) })
	return st
}

func (e engine) drop(ctx context.Context, db *sql.DB, opts outbox.Options) error {
	var errs []error
	for _, tb := range []string{opts.OutboxTable(), opts.LanesTable(), opts.NodesTable()} {
		if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+e.qualify(opts, tb)); err != nil {
			errs = append(errs, fmt.Errorf("drop %s: %w", tb, err))
		}
	}
	return errors.Join(errs...)
}

// rowCount counts every row left in the outbox table (pending or parked).
func (e engine) rowCount(t testing.TB, db *sql.DB, opts outbox.Options) int {
	t.Helper()
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM " + e.qualify(opts, opts.OutboxTable())).Scan(&n); err != nil {
		t.Fatalf("count rows: %v", err)
	}
	return n
}

// waitEmpty fails the test unless the outbox table becomes empty within d (acks are
// completed in batches, shortly after the publish).
func (e engine) waitEmpty(t testing.TB, db *sql.DB, opts outbox.Options, d time.Duration) {
	t.Helper()
	end := time.Now().Add(d)
	for {
		n := e.rowCount(t, db, opts)
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

// keyedMessages returns n messages spread round-robin over keys ordering keys; message i
// has key "k<i%keys>" and sequence i/keys within its key. keys == 0 gives unordered
// messages (no ordering key).
func keyedMessages(n, keys int, topic string) []*message.Message {
	msgs := make([]*message.Message, n)
	for i := range msgs {
		m := message.NewMessage(watermill.NewUUID(), []byte(fmt.Sprintf(`{"n":%d,"topic":%q}`, i, topic)))
		if keys > 0 {
			k := "k" + strconv.Itoa(i%keys)
			m.Metadata.Set(publisher.MetadataOrderingKey, k)
			m.Metadata.Set(chaos.KeyMetadata, k)
			m.Metadata.Set(chaos.SeqMetadata, strconv.Itoa(i/keys))
		}
		m.Metadata.Set("test_index", strconv.Itoa(i))
		msgs[i] = m
	}
	return msgs
}

func uuidsOf(msgs []*message.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.UUID
	}
	return out
}

// writeStats reports what writers did beyond the happy path.
type writeStats struct {
	mu             sync.Mutex
	retries        int // transactions retried after an error
	unknownRetried int // messages rewritten after a commit with unknown outcome (may be duplicate rows)
}

// writeAll publishes msgs to topic through ob with `writers` concurrent writers, each
// committing `batch` messages per transaction. Messages of one ordering key always go to
// the same writer, in order, so per-key order is the write order. A failed transaction
// is retried (after a commit with an unknown outcome the retry may duplicate rows: the
// consumer sees a duplicate, as it would in production). It gives up after deadline.
func writeAll(ctx context.Context, ob *publisher.Outbox, db *sql.DB, topic string, msgs []*message.Message, writers, batch int) (*writeStats, error) {
	ws := &writeStats{}
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

func writeBatch(ctx context.Context, ob *publisher.Outbox, db *sql.DB, topic string, msgs []*message.Message, ws *writeStats) error {
	var last error
	for attempt := 0; attempt < 200; attempt++ {
		if ctx.Err() != nil {
			return fmt.Errorf("write: %w (last error: %v)", ctx.Err(), last)
		}
		if attempt > 0 {
			ws.mu.Lock()
			ws.retries++
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
			ws.unknownRetried += len(msgs)
			ws.mu.Unlock()
		}
	}
	return fmt.Errorf("write: giving up: %w", last)
}

// runForwarder runs fwd in a router of its own until the test ends (or stop is called)
// and returns stop, which shuts it down gracefully and waits.
func runForwarder(t testing.TB, fwd *forwarder.Forwarder) (stop func()) {
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

// newForwarder builds a forwarder with test-friendly timings over store.
func newForwarder(t testing.TB, store outbox.Store, targets forwarder.Targets, cfg forwarder.Config) *forwarder.Forwarder {
	t.Helper()
	fwd, err := forwarder.New(store, targets, cfg, watermill.NopLogger{})
	if err != nil {
		t.Fatalf("forwarder.New: %v", err)
	}
	return fwd
}

// checkDelivered fails the test when a message of want was not delivered or per-key
// order was violated, and logs the duplicate count.
func checkDelivered(t testing.TB, rec *chaos.Recorder, want []string) chaos.Summary {
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
