package brokertest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-amqp/v2/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"
	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/forwarder"
	"github.com/relayer-go/watermill-outbox/internal/testenv"
	"github.com/relayer-go/watermill-outbox/mysql"
	"github.com/relayer-go/watermill-outbox/postgres"
	"github.com/relayer-go/watermill-outbox/publisher"
	"github.com/relayer-go/watermill-outbox/wakeup"
)

// slowPoll is the forwarder's poll interval: a message that arrives within deadline
// can only have been found through a wake-up.
const (
	slowPoll = 10 * time.Second
	deadline = 2 * time.Second
)

type dialect struct {
	name, service, driver string
	newStore              func(*sql.DB, outbox.Options) (outbox.Store, error)
	qualify               func(outbox.Options, string) string
}

var dialects = []dialect{
	{"mariadb", testenv.MySQL, "mysql", func(db *sql.DB, o outbox.Options) (outbox.Store, error) { return mysql.New(db, o) }, mysql.QualifiedTable},
	{"postgres", testenv.Postgres, "pgx", func(db *sql.DB, o outbox.Options) (outbox.Store, error) { return postgres.New(db, o) }, postgres.QualifiedTable},
}

// broker builds the wake-up publisher and a fan-out subscriber of one Pub/Sub for topic.
type broker struct {
	name   string
	pubSub func(t *testing.T, topic string) (message.Publisher, message.Subscriber)
}

var brokers = []broker{
	{"rabbitmq", func(t *testing.T, topic string) (message.Publisher, message.Subscriber) {
		url := testenv.DSN(t, testenv.AMQP)
		// A fan-out exchange per topic, a non-durable queue per subscribing process.
		cfg := amqp.NewNonDurablePubSubConfig(url, amqp.GenerateQueueNameTopicNameWithSuffix(uniqueName("fwd_")))
		cfg.Publish.ChannelPoolSize = 4
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
			deleteExchange(t, url, topic)
		})
		return pub, sub
	}},
	{"nats", func(t *testing.T, _ string) (message.Publisher, message.Subscriber) {
		url := testenv.DSN(t, testenv.NATS)
		// Core NATS without a queue group: every subscriber gets every message.
		js := nats.JetStreamConfig{Disabled: true}
		pub, err := nats.NewPublisher(nats.PublisherConfig{URL: url, Marshaler: &nats.NATSMarshaler{}, JetStream: js}, watermill.NopLogger{})
		if err != nil {
			testenv.Unavailable(t, testenv.NATS, err)
		}
		sub, err := nats.NewSubscriber(nats.SubscriberConfig{URL: url, Unmarshaler: &nats.NATSMarshaler{}, JetStream: js,
			CloseTimeout: 5 * time.Second, SubscribeTimeout: 5 * time.Second}, watermill.NopLogger{})
		if err != nil {
			_ = pub.Close()
			testenv.Unavailable(t, testenv.NATS, err)
		}
		t.Cleanup(func() { _ = sub.Close(); _ = pub.Close() })
		return pub, sub
	}},
	{"redis", func(t *testing.T, _ string) (message.Publisher, message.Subscriber) {
		addr := testenv.DSN(t, testenv.Redis)
		rdb := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: 5 * time.Second})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := rdb.Ping(ctx).Err(); err != nil {
			_ = rdb.Close()
			testenv.Unavailable(t, testenv.Redis, err)
		}
		pub, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: rdb, DefaultMaxlen: 1000}, watermill.NopLogger{})
		if err != nil {
			t.Fatal(err)
		}
		// No consumer group: fan-out, every subscriber reads every wake-up.
		sub, err := redisstream.NewSubscriber(redisstream.SubscriberConfig{Client: rdb, BlockTime: 100 * time.Millisecond}, watermill.NopLogger{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Close(); _ = pub.Close(); _ = rdb.Close() })
		return pub, sub
	}},
}

func uniqueName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

func openTable(t *testing.T, d dialect) (*sql.DB, outbox.Store) {
	t.Helper()
	db, err := sql.Open(d.driver, testenv.DSN(t, d.service))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		testenv.Unavailable(t, d.service, err)
	}
	opts := outbox.Options{TablePrefix: testenv.Prefix(t), Lanes: 8}
	st, err := d.newStore(db, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateSchema(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, tbl := range opts.TableNames() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+d.qualify(opts, tbl))
			cancel()
			if err != nil {
				t.Logf("drop %s: %v", tbl, err)
			}
		}
	})
	return db, st
}

type arrivals struct{ ch chan string }

func (a *arrivals) Publish(_ string, msgs ...*message.Message) error {
	for _, m := range msgs {
		a.ch <- m.UUID
	}
	return nil
}
func (a *arrivals) Close() error { return nil }

// listening logs "Listening for wake-ups" as a signal on ch.
type listening struct {
	watermill.NopLogger
	ch chan struct{}
}

func (l listening) Info(msg string, _ watermill.LogFields) {
	if msg == "Listening for wake-ups" {
		select {
		case l.ch <- struct{}{}:
		default:
		}
	}
}
func (l listening) With(watermill.LogFields) watermill.LoggerAdapter { return l }

// TestWakeUp: rows committed by a publisher not linked to the forwarder (another
// process, as far as the forwarder knows) are sent within a fraction of the 10 s poll
// interval when wake-ups travel over RabbitMQ, NATS or Redis Streams, on MariaDB and
// PostgreSQL.
func TestWakeUp(t *testing.T) {
	for _, b := range brokers {
		for _, d := range dialects {
			t.Run(b.name+"/"+d.name, func(t *testing.T) {
				t.Parallel()
				testWakeUp(t, b, d)
			})
		}
	}
}

func testWakeUp(t *testing.T, b broker, d dialect) {
	db, store := openTable(t, d)
	topic := uniqueName("outbox_wakeup_")
	pub, sub := b.pubSub(t, topic)
	ready := listening{ch: make(chan struct{}, 1)}
	src, err := wakeup.NewSource(sub, topic, store.Options(), ready)
	if err != nil {
		t.Fatal(err)
	}
	rec := &arrivals{ch: make(chan string, 64)}
	fwd, err := forwarder.New(store, forwarder.Targets{"": rec}, forwarder.Config{
		PollInterval: slowPoll, MaxPollInterval: slowPoll, LeaseTTL: 5 * time.Second,
		ShutdownTimeout: 5 * time.Second, StatsInterval: -1, Wake: src,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fwd.Run(ctx) }()
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
	n, err := wakeup.NewNotifier(pub, topic, store.Options(), wakeup.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	ob, err := publisher.New(store, publisher.Config{Notifiers: []outbox.Notifier{n}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-ready.ch:
	case <-time.After(10 * time.Second):
		t.Fatal("wake-up source not listening within 10s")
	}
	time.Sleep(300 * time.Millisecond) // subscribed on the broker, lanes taken, first polls done
	var lat []time.Duration
	for i := range 10 {
		key := ""
		if i%2 == 1 {
			key = fmt.Sprint("key-", i%3)
		}
		t0 := time.Now()
		uuid := commit(t, ob, db, key)
		select {
		case got := <-rec.ch:
			if got != uuid {
				t.Fatalf("got %s, want %s", got, uuid)
			}
			lat = append(lat, time.Since(t0))
		case <-time.After(deadline):
			t.Fatalf("message %d (key %q) not forwarded within %s: no wake-up (polls every %s)", i, key, deadline, slowPoll)
		}
	}
	slices.Sort(lat)
	t.Logf("commit → publish: p50 %s, max %s", lat[len(lat)/2], lat[len(lat)-1])
}

func commit(t *testing.T, ob *publisher.Outbox, db *sql.DB, key string) string {
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

// deleteExchange removes the wake-up topic's exchange (cleanup, bounded by the dial
// timeout and the broker's answer).
func deleteExchange(t *testing.T, url, name string) {
	conn, err := amqp091.DialConfig(url, amqp091.Config{Dial: amqp091.DefaultDial(5 * time.Second)})
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
	if err := ch.ExchangeDelete(name, false, false); err != nil {
		t.Logf("amqp cleanup %s: %v", name, err)
	}
}
