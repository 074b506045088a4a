package forwarder

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/headercodec"
	"github.com/relayer-go/watermill-outbox/internal/testenv"
	"github.com/relayer-go/watermill-outbox/lanes"
	"github.com/relayer-go/watermill-outbox/mysql"
	"github.com/relayer-go/watermill-outbox/postgres"
)

// dialect is one SQL engine the forwarder's tests run against.
type dialect struct {
	name     string
	service  string
	driver   string
	newStore func(db *sql.DB, opts outbox.Options) (outbox.Store, error)
	qualify  func(opts outbox.Options, table string) string
	ph       func(n int) string // n-th bind parameter
}

var dialects = []dialect{
	{
		name: "mariadb", service: testenv.MySQL, driver: "mysql",
		newStore: func(db *sql.DB, o outbox.Options) (outbox.Store, error) { return mysql.New(db, o) },
		qualify:  mysql.QualifiedTable,
		ph:       func(int) string { return "?" },
	},
	{
		name: "postgres", service: testenv.Postgres, driver: "pgx",
		newStore: func(db *sql.DB, o outbox.Options) (outbox.Store, error) { return postgres.New(db, o) },
		qualify:  postgres.QualifiedTable,
		ph:       func(n int) string { return fmt.Sprintf("$%d", n) },
	},
}

var (
	dbMu    sync.Mutex
	dbPools = map[string]*sql.DB{}
)

// forEachDialect runs fn as a parallel subtest per engine.
func forEachDialect(t *testing.T, fn func(t *testing.T, tb *table)) {
	t.Helper()
	for _, d := range dialects {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			fn(t, newTable(t, d, 8))
		})
	}
}

// table is a fresh outbox (private prefix) on one engine.
type table struct {
	d     dialect
	db    *sql.DB
	store outbox.Store
	opts  outbox.Options
}

func openPool(t testing.TB, d dialect) *sql.DB {
	t.Helper()
	dsn := testenv.DSN(t, d.service)
	dbMu.Lock()
	defer dbMu.Unlock()
	if db := dbPools[d.name]; db != nil {
		return db
	}
	db, err := sql.Open(d.driver, dsn)
	if err != nil {
		t.Fatalf("open %s: %v", d.name, err)
	}
	db.SetMaxOpenConns(30)
	db.SetMaxIdleConns(30)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		testenv.Unavailable(t, d.service, err)
	}
	dbPools[d.name] = db // shared by the package's tests; the process exit closes it
	return db
}

func newTable(t testing.TB, d dialect, laneCount int) *table {
	t.Helper()
	db := openPool(t, d)
	opts := outbox.Options{TablePrefix: testenv.Prefix(t), Lanes: laneCount}
	st, err := d.newStore(db, opts)
	if err != nil {
		t.Fatalf("%s store: %v", d.name, err)
	}
	if err := st.CreateSchema(context.Background()); err != nil {
		t.Fatalf("%s schema: %v", d.name, err)
	}
	testenv.Cleanup(t, "drop the test's tables", func(ctx context.Context) error {
		var errs []error
		for _, name := range opts.TableNames() {
			if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+d.qualify(opts, name)); err != nil {
				errs = append(errs, fmt.Errorf("drop %s: %w", name, err))
			}
		}
		return errors.Join(errs...)
	})
	return &table{d: d, db: db, store: st, opts: st.Options()}
}

// withLanes replaces the table by a fresh one with another lane count.
func (tb *table) withLanes(t testing.TB, n int) *table { return newTable(t, tb.d, n) }

// row builds a record for dest; a non-empty key puts it in the key's lane.
func (tb *table) row(dest, key, body string) outbox.Record {
	r := outbox.Record{
		ID:          outbox.NewID(),
		MessageUUID: watermill.NewUUID(),
		Lane:        outbox.Unordered,
		OrderingKey: key,
		Destination: dest,
		Headers:     headercodec.EncodeMetadata(nil, message.Metadata{"body": body}),
		Body:        []byte(body),
		CreatedAt:   time.Now().UTC(),
	}
	if key != "" {
		r.Lane = lanes.Of(key, tb.opts.Lanes)
	}
	return r
}

// keyedRows builds per rows for each of keys ordering keys named prefix0, prefix1, ...,
// interleaved in sequence order, each with the payload "key/seq" (seqOf).
func (tb *table) keyedRows(prefix string, keys, per int) []outbox.Record {
	var recs []outbox.Record
	for i := range per {
		for k := range keys {
			key := fmt.Sprintf("%s%d", prefix, k)
			recs = append(recs, tb.row("t", key, fmt.Sprintf("%s/%d", key, i)))
		}
	}
	return recs
}

func (tb *table) insert(t testing.TB, recs ...outbox.Record) {
	t.Helper()
	ctx := context.Background()
	tx, err := tb.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := tb.store.Insert(ctx, tx, recs); err != nil {
		_ = tx.Rollback()
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// rows counts every row of the table (pending or parked, claimed or not).
func (tb *table) rows(t testing.TB) int {
	t.Helper()
	var n int
	if err := tb.db.QueryRow("SELECT COUNT(*) FROM " + tb.d.qualify(tb.opts, tb.opts.OutboxTable())).Scan(&n); err != nil {
		t.Fatalf("count rows: %v", err)
	}
	return n
}

func (tb *table) parked(t testing.TB) []outbox.Record {
	t.Helper()
	recs, err := tb.store.ListParked(context.Background(), outbox.ParkedQuery{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// keyInLane returns an ordering key whose lane is lane, distinct per n.
func keyInLane(lane, laneCount, n int) string {
	for i := 0; ; i++ {
		k := fmt.Sprintf("k%d-%d", n, i)
		if lanes.Of(k, laneCount) == lane {
			return k
		}
	}
}

// recorder is a target publisher that records what it is given and can fail on demand.
type recorder struct {
	mu     sync.Mutex
	msgs   []published
	calls  int
	fail   func(topic string, m *message.Message) error
	gate   chan struct{} // when set, Publish waits for it (or a token on it)
	notify chan struct{}
}

type published struct {
	topic string
	msg   *message.Message
	row   Row
	at    time.Time
}

func newRecorder() *recorder { return &recorder{notify: make(chan struct{}, 1)} }

func (r *recorder) Publish(topic string, msgs ...*message.Message) error {
	r.mu.Lock()
	gate, fail := r.gate, r.fail
	r.calls++
	r.mu.Unlock()
	if gate != nil {
		<-gate
	}
	for _, m := range msgs {
		if fail != nil {
			if err := fail(topic, m); err != nil {
				return err
			}
		}
		row, _ := RowFromContext(m.Context())
		r.mu.Lock()
		r.msgs = append(r.msgs, published{topic: topic, msg: m, row: row, at: time.Now()})
		r.mu.Unlock()
	}
	select {
	case r.notify <- struct{}{}:
	default:
	}
	return nil
}

func (r *recorder) Close() error { return nil }

func (r *recorder) got() []published {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]published(nil), r.msgs...)
}

func (r *recorder) setFail(fn func(topic string, m *message.Message) error) {
	r.mu.Lock()
	r.fail = fn
	r.mu.Unlock()
}

func (r *recorder) callCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls
}

// waitFor polls cond until it holds or d passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// fastConfig is a configuration with short intervals for tests.
// waitUnordered waits until the unordered counters satisfy ok. Failures and parks are
// counted once the store has recorded them, which a test sees in the table first.
func waitUnordered(t *testing.T, f *Forwarder, ok func(LaneSnapshot) bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s := f.Stats().Unordered
		if ok(s) {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("unordered stats %+v", s)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func fastConfig() Config {
	return Config{
		PollInterval:    10 * time.Millisecond,
		MaxPollInterval: 50 * time.Millisecond,
		// Lanes move through Leave and membership checks (every MaxPollInterval), so
		// the lease only has to outlive a loaded machine's renewal delays.
		LeaseTTL:        5 * time.Second,
		ClaimTTL:        5 * time.Second,
		RetryBase:       10 * time.Millisecond,
		RetryMax:        40 * time.Millisecond,
		ShutdownTimeout: 5 * time.Second,
		StatsInterval:   -1,
	}
}

// start builds a forwarder and runs it in a router of its own until the test ends (or
// stop is called).
func start(t testing.TB, st outbox.Store, targets Targets, cfg Config) (*Forwarder, func()) {
	t.Helper()
	f, err := New(st, targets, cfg, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	r, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.AddToRouter(r); err != nil {
		t.Fatal(err)
	}
	go func() { errc <- r.Run(ctx) }()
	select {
	case <-r.Running():
	case err := <-errc:
		cancel()
		t.Fatalf("router: %v", err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("router: %v", err)
			}
			_ = r.Close()
			_ = f.Close()
		})
	}
	t.Cleanup(stop)
	return f, stop
}

// countingStore counts claims (polls) made through it.
type countingStore struct {
	outbox.Store
	claims       atomic.Int64
	pendingLanes atomic.Int64
}

func (c *countingStore) PendingLanes(ctx context.Context) ([]int, error) {
	c.pendingLanes.Add(1)
	return c.Store.PendingLanes(ctx)
}

func (c *countingStore) Claim(ctx context.Context, p outbox.ClaimParams, dst []outbox.Record) ([]outbox.Record, error) {
	c.claims.Add(1)
	return c.Store.Claim(ctx, p, dst)
}

// corruptHeaders overwrites a stored row's headers with bytes the codec rejects (the
// stores refuse to insert them).
func (tb *table) corruptHeaders(t testing.TB, id outbox.ID) {
	t.Helper()
	q := "UPDATE " + tb.d.qualify(tb.opts, tb.opts.OutboxTable()) + " SET headers = " + tb.d.ph(1) + " WHERE id = " + tb.d.ph(2)
	if _, err := tb.db.Exec(q, []byte{2, 0, 0, 0, 0, 0, 0, 0, 7}, id[:]); err != nil {
		t.Fatal(err)
	}
}

// outageStore fails every call with a connection error while down is set, counting the
// calls it refused (a real store underneath; only the outage is simulated).
type outageStore struct {
	outbox.Store
	down    atomic.Bool
	refused atomic.Int64
}

var errOutage = errors.New("dial tcp 127.0.0.1:3306: connect: connection refused")

func (o *outageStore) fail() error {
	if o.down.Load() {
		o.refused.Add(1)
		return errOutage
	}
	return nil
}

func (o *outageStore) Head(ctx context.Context, q outbox.HeadQuery, dst []outbox.Record) ([]outbox.Record, error) {
	if err := o.fail(); err != nil {
		return dst[:0], err
	}
	return o.Store.Head(ctx, q, dst)
}

func (o *outageStore) MaxLane(ctx context.Context) (int, error) {
	if err := o.fail(); err != nil {
		return 0, err
	}
	return o.Store.MaxLane(ctx)
}

func (o *outageStore) Claim(ctx context.Context, p outbox.ClaimParams, dst []outbox.Record) ([]outbox.Record, error) {
	if err := o.fail(); err != nil {
		return dst[:0], err
	}
	return o.Store.Claim(ctx, p, dst)
}

func (o *outageStore) Complete(ctx context.Context, p outbox.CompleteParams) (int, error) {
	if err := o.fail(); err != nil {
		return 0, err
	}
	return o.Store.Complete(ctx, p)
}

func (o *outageStore) RenewLease(ctx context.Context, p outbox.LeaseParams) (bool, error) {
	if err := o.fail(); err != nil {
		return false, err
	}
	return o.Store.RenewLease(ctx, p)
}

func (o *outageStore) Heartbeat(ctx context.Context, owner string, ttl time.Duration) error {
	if err := o.fail(); err != nil {
		return err
	}
	return o.Store.Heartbeat(ctx, owner, ttl)
}

func (o *outageStore) Members(ctx context.Context) ([]string, error) {
	if err := o.fail(); err != nil {
		return nil, err
	}
	return o.Store.Members(ctx)
}
