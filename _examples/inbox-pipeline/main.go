// Command inbox-pipeline runs a two-service pipeline over RabbitMQ in which every hop
// applies its effects exactly once:
//
//	service A --outbox--> RabbitMQ "orders" --> service B --outbox--> RabbitMQ "payments" --> sink
//	                                            (inbox + outbox)
//
// Service A commits orders and their OrderPlaced messages together (publisher.WithTx);
// its forwarder sends them to RabbitMQ, at least once. Service B consumes them with a
// router whose handler (Inbox.NoPublishHandler: publisher's Handler and the inbox in
// one) opens one transaction per message with the message UUID recorded in
// B's inbox (sent with the BEGIN, in one round trip, since the pool is opened through
// mysql.OpenDB), charges the payment (a row in B's payments table) and stores a
// PaymentCharged message in B's outbox, all in one commit; B's forwarder sends those on. A redelivered OrderPlaced (here: the same
// message published to the queue a second time, as a broker does after a consumer
// crash) is acked without charging again.
//
// B's handler is wrapped by Inbox.NoPublishHandler, the safe wiring: the transaction is
// innermost, so router middleware (Retry, PoisonQueue, ...) sees only committed or
// rolled-back calls. (Inbox.OutboxMiddleware is the router-middleware form, under
// publisher's Middleware nesting rule.)
//
// Both services run in this one process for the demo, each with its own tables (A:
// <prefix>a_*, B: <prefix>b_*) as they would in their own databases.
//
//	go run ./_examples/inbox-pipeline -amqp-url amqp://guest:guest@127.0.0.1:5672/ -dsn 'root@tcp(127.0.0.1:3306)/test'
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-amqp/v2/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	_ "github.com/go-sql-driver/mysql"
	amqp091 "github.com/rabbitmq/amqp091-go"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/forwarder"
	"github.com/relayer-go/watermill-outbox/inbox"
	"github.com/relayer-go/watermill-outbox/mysql"
	"github.com/relayer-go/watermill-outbox/publisher"
)

const orders = 5

func main() {
	dsn := flag.String("dsn", envOr("OUTBOX_DSN", "root@tcp(127.0.0.1:3306)/test"), "MySQL/MariaDB DSN (env OUTBOX_DSN)")
	url := flag.String("amqp-url", envOr("OUTBOX_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"), "RabbitMQ URL (env OUTBOX_AMQP_URL)")
	prefix := flag.String("prefix", "pipeline_", "table prefix")
	timeout := flag.Duration("timeout", 60*time.Second, "give up after this long")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := run(ctx, *dsn, *url, *prefix); err != nil {
		fmt.Fprintln(os.Stderr, "inbox-pipeline:", err)
		os.Exit(1)
	}
}

// service is one service's database side: its store (outbox + inbox tables) and outbox.
type service struct {
	store *mysql.Store
	out   *publisher.Outbox
	fwd   *forwarder.Forwarder
}

func newService(ctx context.Context, db *sql.DB, prefix string, pub message.Publisher) (*service, error) {
	store, err := mysql.New(db, outbox.Options{TablePrefix: prefix})
	if err != nil {
		return nil, err
	}
	if err := store.CreateSchema(ctx); err != nil { // outbox and inbox tables
		return nil, err
	}
	fwd, err := forwarder.New(store, forwarder.Targets{"": pub}, forwarder.Config{}, nil)
	if err != nil {
		return nil, err
	}
	out, err := publisher.New(store, publisher.Config{Notifier: fwd}, nil)
	if err != nil {
		return nil, err
	}
	return &service{store: store, out: out, fwd: fwd}, nil
}

func run(ctx context.Context, dsn, url, prefix string) error {
	// Through the dialect's connector, the inbox record travels with the BEGIN.
	db, err := mysql.OpenDB(dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(32)
	db.SetMaxIdleConns(32)

	// Per-run queues, declared before anything is published (RabbitMQ drops messages
	// sent to a queue that does not exist) and deleted at the end.
	runID := strconv.FormatInt(time.Now().UnixNano(), 36)
	ordersTopic, paymentsTopic := "inbox_example."+runID+".orders", "inbox_example."+runID+".payments"
	cfg := amqp.NewDurableQueueConfig(url)
	cfg.Publish.ChannelPoolSize = 8
	cfg.Publish.ConfirmDelivery = true
	sub, err := amqp.NewSubscriber(cfg, watermill.NopLogger{})
	if err != nil {
		return err
	}
	defer sub.Close()
	for _, t := range []string{ordersTopic, paymentsTopic} {
		if err := sub.SubscribeInitialize(t); err != nil {
			return fmt.Errorf("declare queue %s: %w", t, err)
		}
	}
	defer deleteQueues(url, ordersTopic, paymentsTopic)
	pub, err := amqp.NewPublisher(cfg, watermill.NopLogger{})
	if err != nil {
		return err
	}
	defer pub.Close()

	a, err := newService(ctx, db, prefix+"a_", pub)
	if err != nil {
		return err
	}
	b, err := newService(ctx, db, prefix+"b_", pub)
	if err != nil {
		return err
	}
	payments := mysql.QualifiedTable(b.store.Options(), prefix+"b_payments")
	if _, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+payments+" (order_id VARCHAR(64) NOT NULL, charged_at DATETIME(6) NOT NULL)"); err != nil {
		return err
	}

	// Service B: the inbox records each OrderPlaced in the transaction that charges it.
	in, err := inbox.New(b.store, inbox.Config{}, nil)
	if err != nil {
		return err
	}
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	router.AddMiddleware(middleware.Retry{MaxRetries: 3, InitialInterval: 10 * time.Millisecond}.Middleware)
	// One outbox transaction per call, beginning with the inbox record, inside Retry.
	router.AddConsumerHandler("charge_payment", ordersTopic, sub, in.NoPublishHandler(b.out, func(msg *message.Message) error {
		ctx := msg.Context()
		tx, _ := publisher.SQLTxFromContext(ctx)
		orderID := string(msg.Payload)
		if _, err := tx.ExecContext(ctx, "INSERT INTO "+payments+" (order_id, charged_at) VALUES (?, UTC_TIMESTAMP(6))", orderID); err != nil {
			return err
		}
		out, _ := publisher.PublisherFromContext(ctx)
		return out.Publish(paymentsTopic, message.NewMessage(watermill.NewUUID(), []byte(orderID)))
	}))
	// Retention of B's inbox: entries older than the window go, by one instance at a time.
	cleaner, err := inbox.NewCleaner(b.store, inbox.CleanerConfig{Window: 7 * 24 * time.Hour}, nil)
	if err != nil {
		return err
	}
	stop, err := start(ctx, router, a.fwd, b.fwd, cleaner)
	if err != nil {
		return err
	}
	defer stop()

	// Service A: each order and its OrderPlaced message in one transaction.
	var first *message.Message
	for i := range orders {
		orderID := fmt.Sprintf("order-%s-%d", runID, i)
		msg := message.NewMessage(watermill.NewUUID(), []byte(orderID))
		if first == nil {
			first = msg
		}
		err := a.out.WithTx(ctx, func(ctx context.Context, tx *publisher.Tx) error {
			// (A's own order row would be written here through tx.SQLTx().)
			return tx.Publish(ordersTopic, msg)
		})
		if err != nil {
			return err
		}
	}
	fmt.Printf("service A committed %d orders and their OrderPlaced messages\n", orders)

	// A redelivery, as after a consumer crash: the same message (same UUID) again.
	if err := pub.Publish(ordersTopic, first.Copy()); err != nil {
		return err
	}
	fmt.Println("the broker delivers order 0 a second time")

	// The sink: every PaymentCharged, once per charged order.
	charged, err := receive(ctx, sub, paymentsTopic, orders)
	if err != nil {
		return err
	}
	for in.Counters().Duplicates < 1 && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	var rows int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+payments).Scan(&rows); err != nil {
		return err
	}
	c := in.Counters()
	fmt.Printf("service B charged %d payments (%d rows), skipped %d duplicate\n", c.Recorded, rows, c.Duplicates)
	fmt.Printf("the sink received %d PaymentCharged messages for %d orders\n", charged.total, len(charged.orders))
	if rows != orders || c.Duplicates != 1 || len(charged.orders) != orders {
		return fmt.Errorf("want %d payments, 1 duplicate skipped, %d orders paid", orders, orders)
	}
	fmt.Println("OK: inbox-pipeline: each order charged once, although delivered twice")
	return nil
}

// start runs the router, both forwarders and the cleaner; stop ends them.
func start(ctx context.Context, router *message.Router, a, b *forwarder.Forwarder, cleaner *inbox.Cleaner) (stop func(), err error) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{}, 3)
	go func() { _ = router.Run(ctx); done <- struct{}{} }()
	go func() { _ = a.Run(ctx); done <- struct{}{} }()
	go func() { _ = b.Run(ctx); done <- struct{}{} }()
	if err := cleaner.Start(ctx); err != nil {
		cancel()
		return nil, err
	}
	select {
	case <-router.Running():
	case <-ctx.Done():
		cancel()
		return nil, ctx.Err()
	}
	return func() {
		cancel()
		_ = cleaner.Stop(context.Background())
		for range 3 {
			<-done
		}
	}, nil
}

type received struct {
	total  int
	orders map[string]bool
}

// receive reads topic until n distinct orders were paid, and a moment longer (a
// second payment of an order would show up then).
func receive(ctx context.Context, sub message.Subscriber, topic string, n int) (received, error) {
	msgs, err := sub.Subscribe(ctx, topic)
	if err != nil {
		return received{}, err
	}
	r := received{orders: map[string]bool{}}
	var grace <-chan time.Time
	for {
		select {
		case m, ok := <-msgs:
			if !ok {
				return r, errors.New("subscription closed")
			}
			m.Ack()
			r.total++
			r.orders[string(m.Payload)] = true
			if len(r.orders) == n && grace == nil {
				grace = time.After(500 * time.Millisecond)
			}
		case <-grace:
			return r, nil
		case <-ctx.Done():
			return r, fmt.Errorf("timed out with %d of %d orders paid", len(r.orders), n)
		}
	}
}

func deleteQueues(url string, topics ...string) {
	conn, err := amqp091.Dial(url)
	if err != nil {
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	defer ch.Close()
	for _, t := range topics {
		_, _ = ch.QueueDelete(t, false, false, false)
	}
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
