package forwarder_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	_ "github.com/jackc/pgx/v5/stdlib" // "pgx"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/forwarder"
	"github.com/relayer-go/watermill-outbox/internal/testenv"
	"github.com/relayer-go/watermill-outbox/postgres"
	"github.com/relayer-go/watermill-outbox/publisher"
)

// The PostgreSQL LISTEN/NOTIFY tests; the wake-ups over brokers (RabbitMQ, NATS, Redis
// Streams) are tested in module wakeup/brokertest, which may require their adapters.
// This file brings its own small scaffolding (pgDB, pgTable, runFwd) so that it
// depends on nothing but the library and PostgreSQL.

// pgDB opens the PostgreSQL test database (closed at the end of the test) and returns
// it with its DSN.
func pgDB(t *testing.T) (*sql.DB, string) {
	t.Helper()
	dsn := testenv.DSN(t, testenv.Postgres)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		testenv.Unavailable(t, testenv.Postgres, err)
	}
	return db, dsn
}

// pgTable creates a fresh outbox with lanes lanes, dropped at the end of the test.
func pgTable(t *testing.T, db *sql.DB, lanes int) outbox.Store {
	t.Helper()
	opts := outbox.Options{TablePrefix: testenv.Prefix(t), Lanes: lanes}
	st, err := postgres.New(db, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := st.CreateSchema(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, tbl := range opts.TableNames() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+postgres.QualifiedTable(opts, tbl))
			cancel()
			if err != nil {
				t.Logf("drop %s: %v", tbl, err)
			}
		}
	})
	return st
}

// runFwd builds a forwarder and runs it until the test ends.
func runFwd(t *testing.T, st outbox.Store, target message.Publisher, cfg forwarder.Config, logger watermill.LoggerAdapter) {
	t.Helper()
	f, err := forwarder.New(st, forwarder.Targets{"": target}, cfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("forwarder: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("forwarder did not stop within 30s")
		}
	})
}

func uniqueName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// slowPoll is the poll interval of the wake-up tests: a message that arrives within
// wakeDeadline can only have been found through a wake-up.
const (
	slowPoll     = 10 * time.Second
	wakeDeadline = 2 * time.Second
)

func wakeConfig(src outbox.WakeSource) forwarder.Config {
	return forwarder.Config{
		PollInterval: slowPoll, MaxPollInterval: slowPoll, LeaseTTL: 5 * time.Second,
		ShutdownTimeout: 5 * time.Second, StatsInterval: -1, Wake: src,
	}
}

// arrivals is a target publisher that reports each message's arrival.
type arrivals struct{ ch chan string }

func newArrivals() *arrivals { return &arrivals{ch: make(chan string, 1024)} }

func (a *arrivals) Publish(_ string, msgs ...*message.Message) error {
	for _, m := range msgs {
		a.ch <- m.UUID
	}
	return nil
}
func (a *arrivals) Close() error { return nil }

// commitOne commits one message (keyed when key is not empty) and returns its UUID.
func commitOne(t testing.TB, ob *publisher.Outbox, db *sql.DB, key string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tx, err := ob.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m := message.NewMessage(watermill.NewUUID(), []byte("x"))
	if key != "" {
		m.Metadata.Set(publisher.MetadataOrderingKey, key)
	}
	if err := tx.Publish("wake_topic", m); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return m.UUID
}

// expectFast commits n messages one at a time, alternating unordered and keyed ones,
// and fails unless each arrives within wakeDeadline (the forwarder polls every
// slowPoll, so only a wake-up explains it).
func expectFast(t *testing.T, ob *publisher.Outbox, db *sql.DB, rec *arrivals, n int) {
	t.Helper()
	var lat []time.Duration
	for i := range n {
		key := ""
		if i%2 == 1 {
			key = "key-" + string(rune('a'+i%5))
		}
		t0 := time.Now()
		uuid := commitOne(t, ob, db, key)
		select {
		case got := <-rec.ch:
			if got != uuid {
				t.Fatalf("message %d: got %s, want %s", i, got, uuid)
			}
			lat = append(lat, time.Since(t0))
		case <-time.After(wakeDeadline):
			t.Fatalf("message %d (key %q) not forwarded within %s: no wake-up (polls every %s)", i, key, wakeDeadline, slowPoll)
		}
	}
	slices.Sort(lat)
	t.Logf("%d messages, commit → publish: p50 %s, max %s", n, lat[len(lat)/2], lat[len(lat)-1])
}

// logSpy is a logger that records every entry (watermill's CaptureLoggerAdapter hands
// out its map unguarded).
type logSpy struct {
	mu      sync.Mutex
	entries []logEntry
	fields  watermill.LogFields
	root    *logSpy
}

type logEntry struct {
	level watermill.LogLevel
	msg   string
	err   error
}

func newLogSpy() *logSpy { s := &logSpy{}; s.root = s; return s }

func (s *logSpy) add(level watermill.LogLevel, msg string, err error) {
	s.root.mu.Lock()
	s.root.entries = append(s.root.entries, logEntry{level, msg, err})
	s.root.mu.Unlock()
}
func (s *logSpy) Error(msg string, err error, _ watermill.LogFields) {
	s.add(watermill.ErrorLogLevel, msg, err)
}
func (s *logSpy) Info(msg string, _ watermill.LogFields)  { s.add(watermill.InfoLogLevel, msg, nil) }
func (s *logSpy) Debug(msg string, _ watermill.LogFields) { s.add(watermill.DebugLogLevel, msg, nil) }
func (s *logSpy) Trace(msg string, _ watermill.LogFields) { s.add(watermill.TraceLogLevel, msg, nil) }
func (s *logSpy) With(f watermill.LogFields) watermill.LoggerAdapter {
	return &logSpy{fields: f, root: s.root}
}

func (s *logSpy) snapshot() []logEntry {
	s.root.mu.Lock()
	defer s.root.mu.Unlock()
	return slices.Clone(s.root.entries)
}

// hasError reports whether an error entry wraps target.
func (s *logSpy) hasError(target error) bool {
	for _, e := range s.snapshot() {
		if e.level == watermill.ErrorLogLevel && errors.Is(e.err, target) {
			return true
		}
	}
	return false
}

func (s *logSpy) dump(t *testing.T) {
	for _, e := range s.snapshot() {
		t.Logf("log %d %s: %v", e.level, e.msg, e.err)
	}
}

// waitLog waits until logger recorded at least n entries msg at level.
func waitLog(t *testing.T, logger *logSpy, level watermill.LogLevel, msg string, n int, d time.Duration) {
	t.Helper()
	end := time.Now().Add(d)
	for {
		count := 0
		for _, e := range logger.snapshot() {
			if e.level == level && e.msg == msg {
				count++
			}
		}
		if count >= n {
			return
		}
		if time.Now().After(end) {
			logger.dump(t)
			t.Fatalf("log %q seen %d times within %s, want %d", msg, count, d, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

const listeningLog = "Listening for commit notifications"

// withParam returns dsn (a URL) with a query parameter set; it skips DSNs in keyword
// form, which the tests do not rewrite.
func withParam(t *testing.T, dsn, key, value string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		t.Skipf("OUTBOX_TEST_POSTGRES_DSN is not a postgres:// URL; this test rewrites it")
	}
	q := u.Query()
	q.Set(key, value)
	u.RawQuery = q.Encode()
	return u.String()
}

// TestWake_PostgresListen: with LISTEN/NOTIFY (a postgres.Notifier on the writer, a
// postgres.Listener as the forwarder's Wake) unordered and ordered rows committed by a
// publisher that is not linked to the forwarder are sent within milliseconds although
// the forwarder polls every 10 s, across the listener's pings of its silent connection
// (every 100 ms here), with one connection held by the listener. After the listening
// connection is killed (pg_terminate_backend) the listener reconnects and wake-ups work
// again.
func TestWake_PostgresListen(t *testing.T) {
	t.Parallel()
	db, dsn := pgDB(t)
	store := pgTable(t, db, 8)
	app := uniqueName("outbox_listen_")
	logger := newLogSpy()
	l, err := postgres.NewListener(withParam(t, dsn, "application_name", app), store.Options(),
		postgres.ListenerConfig{ReconnectMin: 20 * time.Millisecond, PingInterval: 100 * time.Millisecond}, logger)
	if err != nil {
		t.Fatal(err)
	}
	rec := newArrivals()
	runFwd(t, store, rec, wakeConfig(l), nil)
	n, err := postgres.NewNotifier(db, store.Options(), postgres.NotifierConfig{}, logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	ob, err := publisher.New(store, publisher.Config{Notifiers: []outbox.Notifier{n}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitLog(t, logger, watermill.InfoLogLevel, listeningLog, 1, 10*time.Second)
	time.Sleep(300 * time.Millisecond) // lane leases taken, first polls done
	// Idle, the listener holds one connection (the probe's is gone).
	var conns int
	waitFor := time.Now().Add(5 * time.Second)
	for {
		qctx, qcancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := db.QueryRowContext(qctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", app).Scan(&conns)
		qcancel()
		if err != nil {
			t.Fatal(err)
		}
		if conns == 1 || time.Now().After(waitFor) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if conns != 1 {
		t.Fatalf("the listener holds %d connections, want 1", conns)
	}
	expectFast(t, ob, db, rec, 20)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var killed int
	if err := db.QueryRowContext(ctx, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1", app).Scan(&killed); err != nil {
		t.Fatal(err)
	}
	if killed == 0 {
		t.Fatal("no listening connection found to terminate")
	}
	waitLog(t, logger, watermill.InfoLogLevel, listeningLog, 2, 10*time.Second)
	expectFast(t, ob, db, rec, 10)
}

// TestWake_PostgresListenRetriesAfterWorking: a listener that has worked treats a later
// failure as transient, even one that would make a first connection give up (LISTEN
// refused, as during a failover's recovery): it retries with backoff and listens again
// when the server takes LISTEN again, instead of leaving the forwarder to poll for the
// rest of its life.
func TestWake_PostgresListenRetriesAfterWorking(t *testing.T) {
	t.Parallel()
	db, dsn := pgDB(t)
	store := pgTable(t, db, 8)
	m := &proxyMode{}
	proxied, cut := startPgProxy(t, withParam(t, dsn, "sslmode", "disable"), m)
	logger := newLogSpy()
	l, err := postgres.NewListener(proxied, store.Options(),
		postgres.ListenerConfig{ReconnectMin: 20 * time.Millisecond, ReconnectMax: 100 * time.Millisecond, ProbeTimeout: 2 * time.Second}, logger)
	if err != nil {
		t.Fatal(err)
	}
	rec := newArrivals()
	runFwd(t, store, rec, wakeConfig(l), logger)
	n, err := postgres.NewNotifier(db, store.Options(), postgres.NotifierConfig{}, logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	ob, err := publisher.New(store, publisher.Config{Notifiers: []outbox.Notifier{n}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitLog(t, logger, watermill.InfoLogLevel, listeningLog, 1, 10*time.Second)
	time.Sleep(300 * time.Millisecond) // lane leases taken, first polls done
	expectFast(t, ob, db, rec, 4)

	// The server refuses LISTEN for a while, and the listening connection is lost.
	m.rejectListen.Store(true)
	cut()
	refused := func() bool {
		return slices.ContainsFunc(logger.snapshot(), func(e logEntry) bool {
			return e.err != nil && strings.Contains(e.err.Error(), "LISTEN refused")
		})
	}
	for end := time.Now().Add(10 * time.Second); !refused(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			logger.dump(t)
			t.Fatal("no reconnection met the refused LISTEN")
		}
	}
	time.Sleep(300 * time.Millisecond) // several refused attempts
	m.rejectListen.Store(false)
	waitLog(t, logger, watermill.InfoLogLevel, listeningLog, 2, 10*time.Second)
	if slices.ContainsFunc(logger.snapshot(), func(e logEntry) bool {
		return errors.Is(e.err, outbox.ErrWakeUnavailable) && e.msg != "Listening connection failed; reconnecting with backoff (the forwarder polls meanwhile)"
	}) {
		logger.dump(t)
		t.Fatal("the forwarder was told wake-ups are unavailable after the listener had worked")
	}
	expectFast(t, ob, db, rec, 4)
}

// TestWake_PostgresListenFallback: where notifications never reach the listening
// connection (a proxy that drops them, as a transaction-mode pooler does), the listener
// finds out with its probe, and where LISTEN is refused (a proxy that answers it with
// an error) it finds out at once; either way it says so in the log and the forwarder
// goes on polling.
func TestWake_PostgresListenFallback(t *testing.T) {
	t.Run("notifications never arrive", func(t *testing.T) {
		t.Parallel()
		testListenFallback(t, false, 300*time.Millisecond)
	})
	t.Run("LISTEN refused", func(t *testing.T) {
		t.Parallel()
		// A probe timeout far above the test's deadline: only the refusal explains a
		// fallback in time.
		testListenFallback(t, true, time.Minute)
	})
}

func testListenFallback(t *testing.T, rejectListen bool, probeTimeout time.Duration) {
	db, dsn := pgDB(t)
	store := pgTable(t, db, 4)
	proxied := pgProxy(t, withParam(t, dsn, "sslmode", "disable"), rejectListen)
	logger := newLogSpy()
	l, err := postgres.NewListener(proxied, store.Options(), postgres.ListenerConfig{ProbeTimeout: probeTimeout}, logger)
	if err != nil {
		t.Fatal(err)
	}
	rec := newArrivals()
	cfg := wakeConfig(l)
	cfg.PollInterval, cfg.MaxPollInterval = 100*time.Millisecond, 200*time.Millisecond
	runFwd(t, store, rec, cfg, logger)
	waitLog(t, logger, watermill.ErrorLogLevel, "Wake-ups from other processes unavailable: their commits are found by polling", 1, 10*time.Second)
	if !logger.hasError(outbox.ErrWakeUnavailable) {
		logger.dump(t)
		t.Fatal("no logged error wraps outbox.ErrWakeUnavailable")
	}
	reason := "received no probe notification"
	if rejectListen {
		reason = "LISTEN refused"
	}
	if !slices.ContainsFunc(logger.snapshot(), func(e logEntry) bool { return e.err != nil && strings.Contains(e.err.Error(), reason) }) {
		logger.dump(t)
		t.Fatalf("no logged error says %q", reason)
	}
	ob, err := publisher.New(store, publisher.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	uuid := commitOne(t, ob, db, "")
	select {
	case got := <-rec.ch:
		if got != uuid {
			t.Fatalf("got %s, want %s", got, uuid)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("message not forwarded by polling after the fallback")
	}
}

// pgProxy forwards TCP connections to the server of dsn (sslmode disable) and returns
// dsn pointed at the proxy. It drops every NotificationResponse the server sends (as a
// transaction-mode pooler, whose server connection is someone else's by the time a
// notification comes); with rejectListen it also turns every simple query that starts
// with LISTEN into one that fails (SELECT 1/0), as a server that refuses LISTEN.
func pgProxy(t *testing.T, dsn string, rejectListen bool) string {
	t.Helper()
	m := &proxyMode{}
	m.rejectListen.Store(rejectListen)
	m.dropNotifications.Store(true)
	proxied, _ := startPgProxy(t, dsn, m)
	return proxied
}

// proxyMode is what a pgProxy does to the traffic, switchable while it runs.
type proxyMode struct {
	rejectListen      atomic.Bool // fail every LISTEN (SELECT 1/0)
	dropNotifications atomic.Bool // drop every NotificationResponse
}

// startPgProxy starts a proxy to the server of dsn that treats traffic as m says; it
// returns dsn pointed at the proxy and a function that cuts every connection open now.
func startPgProxy(t *testing.T, dsn string, m *proxyMode) (string, func()) {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	target := u.Host
	if !strings.Contains(target, ":") {
		target += ":5432"
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	track := func(c net.Conn) {
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
	}
	go func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			server, err := net.DialTimeout("tcp", target, 5*time.Second)
			if err != nil {
				client.Close()
				continue
			}
			track(client)
			track(server)
			go func() { copyClient(server, client, &m.rejectListen); server.Close() }()
			go func() { copyServer(client, server, &m.dropNotifications); client.Close() }()
		}
	}()
	cut := func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
		conns = nil
	}
	t.Cleanup(func() {
		ln.Close()
		cut()
	})
	u.Host = ln.Addr().String()
	return u.String(), cut
}

// readMsg reads one protocol message: a type byte (none for the client's startup
// message) and an int32 length that counts itself.
func readMsg(src io.Reader, typed bool) (typ byte, body []byte, err error) {
	if typed {
		var b [1]byte
		if _, err := io.ReadFull(src, b[:]); err != nil {
			return 0, nil, err
		}
		typ = b[0]
	}
	var l [4]byte
	if _, err := io.ReadFull(src, l[:]); err != nil {
		return 0, nil, err
	}
	n := int(binary.BigEndian.Uint32(l[:])) - 4
	if n < 0 || n > 1<<24 {
		return 0, nil, errors.New("bad message length")
	}
	body = make([]byte, n)
	_, err = io.ReadFull(src, body)
	return typ, body, err
}

func writeMsg(dst io.Writer, typ byte, typed bool, body []byte) error {
	var out []byte
	if typed {
		out = append(out, typ)
	}
	out = binary.BigEndian.AppendUint32(out, uint32(len(body)+4))
	_, err := dst.Write(append(out, body...))
	return err
}

// copyServer copies the server's messages to dst, except NotificationResponse ('A')
// while drop is set.
func copyServer(dst io.Writer, src io.Reader, drop *atomic.Bool) {
	for {
		typ, body, err := readMsg(src, true)
		if err != nil {
			return
		}
		if typ == 'A' && drop.Load() {
			continue
		}
		if writeMsg(dst, typ, true, body) != nil {
			return
		}
	}
}

// copyClient copies the client's messages to dst (the first one is the untyped startup
// message), failing LISTEN queries while rejectListen is set.
func copyClient(dst io.Writer, src io.Reader, rejectListen *atomic.Bool) {
	for typed := false; ; typed = true {
		typ, body, err := readMsg(src, typed)
		if err != nil {
			return
		}
		if rejectListen.Load() && typ == 'Q' && strings.HasPrefix(strings.ToUpper(string(body)), "LISTEN") {
			body = []byte("SELECT 1/0\x00")
		}
		if writeMsg(dst, typ, typed, body) != nil {
			return
		}
	}
}
