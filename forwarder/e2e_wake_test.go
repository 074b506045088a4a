package forwarder_test

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-amqp/v2/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/forwarder"
	"github.com/relayer-go/watermill-outbox/forwarder/internal/chaos"
	"github.com/relayer-go/watermill-outbox/internal/testenv"
	"github.com/relayer-go/watermill-outbox/postgres"
	"github.com/relayer-go/watermill-outbox/publisher"
	"github.com/relayer-go/watermill-outbox/wakeup"
)

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
	tx, err := ob.Begin(ctx, db)
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
	db, dsn := postgreSQL.open(t)
	store := postgreSQL.table(t, db, 8)
	app := chaos.UniqueName("outbox_listen_")
	logger := newLogSpy()
	l, err := postgres.NewListener(withParam(t, dsn, "application_name", app), store.Options(),
		postgres.ListenerConfig{ReconnectMin: 20 * time.Millisecond, PingInterval: 100 * time.Millisecond}, logger)
	if err != nil {
		t.Fatal(err)
	}
	rec := newArrivals()
	fwd := newForwarder(t, store, forwarder.Targets{"": rec}, wakeConfig(l))
	runForwarder(t, fwd)
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
	db, dsn := postgreSQL.open(t)
	store := postgreSQL.table(t, db, 4)
	proxied := pgProxy(t, withParam(t, dsn, "sslmode", "disable"), rejectListen)
	logger := newLogSpy()
	l, err := postgres.NewListener(proxied, store.Options(), postgres.ListenerConfig{ProbeTimeout: probeTimeout}, logger)
	if err != nil {
		t.Fatal(err)
	}
	rec := newArrivals()
	cfg := wakeConfig(l)
	cfg.PollInterval, cfg.MaxPollInterval = 100*time.Millisecond, 200*time.Millisecond
	fwd, err := forwarder.New(store, forwarder.Targets{"": rec}, cfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	runForwarder(t, fwd)
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
			go func() { copyClient(server, client, rejectListen); server.Close() }()
			go func() { copyServer(client, server); client.Close() }()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	u.Host = ln.Addr().String()
	return u.String()
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

// copyServer copies the server's messages to dst, except NotificationResponse ('A').
func copyServer(dst io.Writer, src io.Reader) {
	for {
		typ, body, err := readMsg(src, true)
		if err != nil {
			return
		}
		if typ == 'A' {
			continue
		}
		if writeMsg(dst, typ, true, body) != nil {
			return
		}
	}
}

// copyClient copies the client's messages to dst (the first one is the untyped startup
// message), failing LISTEN queries when rejectListen is set.
func copyClient(dst io.Writer, src io.Reader, rejectListen bool) {
	for typed := false; ; typed = true {
		typ, body, err := readMsg(src, typed)
		if err != nil {
			return
		}
		if rejectListen && typ == 'Q' && strings.HasPrefix(strings.ToUpper(string(body)), "LISTEN") {
			body = []byte("SELECT 1/0\x00")
		}
		if writeMsg(dst, typ, typed, body) != nil {
			return
		}
	}
}

// TestWake_RabbitMQ: with wake-ups over RabbitMQ (a wakeup.Notifier on the writer, a
// wakeup.Source subscribed through a fan-out queue of its own as the forwarder's Wake)
// rows committed by a publisher not linked to the forwarder are sent within
// milliseconds although the forwarder polls every 10 s, on MariaDB and on PostgreSQL.
func TestWake_RabbitMQ(t *testing.T) {
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			db, _ := e.open(t)
			amqpURL := testenv.DSN(t, testenv.AMQP)
			store := e.table(t, db, 8)
			topic := chaos.UniqueName("outbox_wakeup_")
			pub, sub := wakeupPubSub(t, amqpURL, topic)
			logger := newLogSpy()
			src, err := wakeup.NewSource(sub, topic, store.Options(), logger)
			if err != nil {
				t.Fatal(err)
			}
			rec := newArrivals()
			runForwarder(t, newForwarder(t, store, forwarder.Targets{"": rec}, wakeConfig(src)))
			n, err := wakeup.NewNotifier(pub, topic, store.Options(), wakeup.Config{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = n.Close() })
			ob, err := publisher.New(store, publisher.Config{Notifiers: []outbox.Notifier{n}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			waitLog(t, logger, watermill.InfoLogLevel, "Listening for wake-ups", 1, 10*time.Second)
			time.Sleep(300 * time.Millisecond)
			expectFast(t, ob, db, rec, 20)
		})
	}
}

// wakeupPubSub returns a RabbitMQ publisher and a subscriber with a queue of its own
// bound to topic's fan-out exchange (each forwarder process gets every wake-up); the
// exchange is deleted at the end of the test.
func wakeupPubSub(t *testing.T, amqpURL, topic string) (message.Publisher, message.Subscriber) {
	t.Helper()
	cfg := amqp.NewNonDurablePubSubConfig(amqpURL, amqp.GenerateQueueNameTopicNameWithSuffix(chaos.UniqueName("fwd_")))
	pub, err := amqp.NewPublisher(cfg, watermill.NopLogger{})
	if err != nil {
		testenv.Unavailable(t, testenv.AMQP, err)
	}
	sub, err := amqp.NewSubscriber(cfg, watermill.NopLogger{})
	if err != nil {
		_ = pub.Close()
		testenv.Unavailable(t, testenv.AMQP, err)
	}
	t.Cleanup(func() {
		_ = sub.Close()
		_ = pub.Close()
		deleteExchange(t, amqpURL, topic)
	})
	return pub, sub
}

func deleteExchange(t *testing.T, amqpURL, name string) {
	conn, err := amqp091.DialConfig(amqpURL, amqp091.Config{Dial: amqp091.DefaultDial(5 * time.Second)})
	if err != nil {
		t.Logf("amqp cleanup: %v", err)
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Logf("amqp cleanup: %v", err)
		return
	}
	defer ch.Close()
	if err := ch.ExchangeDelete(name, false, false); err != nil && !errors.Is(err, amqp091.ErrClosed) {
		t.Logf("amqp cleanup %s: %v", name, err)
	}
}
