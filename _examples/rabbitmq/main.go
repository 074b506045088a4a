// Command rabbitmq forwards outbox rows to RabbitMQ with watermill-amqp.
//
// Two things matter with RabbitMQ:
//
//   - Declare the queues before the forwarder publishes. RabbitMQ drops a message sent
//     to a queue (or exchange) that does not exist, and watermill-amqp reports success
//     even with publisher confirms on: the outbox row would be deleted and the message
//     lost. Here the subscriber's SubscribeInitialize declares them at start-up; in
//     production declare them in your deployment (or a topology builder).
//   - Give the publisher a channel pool (ChannelPoolSize; 0 opens a channel per
//     Publish) and turn on ConfirmDelivery, so that a row is deleted only after the
//     broker has the message.
//
// Per-key order: messages with one ordering key leave the outbox in order, one at a time,
// and a queue keeps that order for its consumer.
//
//	go run ./_examples/rabbitmq -amqp-url amqp://guest:guest@127.0.0.1:5672/ -dsn 'root@tcp(127.0.0.1:3306)/test'
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-amqp/v2/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	_ "github.com/go-sql-driver/mysql"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/forwarder"
	"github.com/relayer-go/watermill-outbox/mysql"
	"github.com/relayer-go/watermill-outbox/publisher"
)

var topics = []string{"outbox_example.orders", "outbox_example.payments"}

func main() {
	dsn := flag.String("dsn", envOr("OUTBOX_DSN", "root@tcp(127.0.0.1:3306)/test"), "MySQL/MariaDB DSN (env OUTBOX_DSN)")
	url := flag.String("amqp-url", envOr("OUTBOX_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"), "RabbitMQ URL (env OUTBOX_AMQP_URL)")
	prefix := flag.String("prefix", "rabbitmq_", "table prefix")
	timeout := flag.Duration("timeout", 30*time.Second, "give up after this long")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := run(ctx, *dsn, *url, *prefix); err != nil {
		fmt.Fprintln(os.Stderr, "rabbitmq:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, dsn, url, prefix string) error {
	logger := watermill.NopLogger{}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	// A forwarder runs one worker per lane it holds (64 by default): unbounded, they would
	// open a connection each after every burst, and database/sql keeps only two idle.
	db.SetMaxOpenConns(16)
	db.SetMaxIdleConns(16)
	store, err := mysql.New(db, outbox.Options{TablePrefix: prefix})
	if err != nil {
		return err
	}
	if err := store.CreateSchema(ctx); err != nil {
		return err
	}

	cfg := amqp.NewDurableQueueConfig(url) // default exchange, one durable queue per topic
	cfg.Publish.ChannelPoolSize = 8
	cfg.Publish.ConfirmDelivery = true
	sub, err := amqp.NewSubscriber(cfg, logger)
	if err != nil {
		return err
	}
	defer sub.Close()
	for _, t := range topics {
		if err := sub.SubscribeInitialize(t); err != nil { // declare before publishing
			return fmt.Errorf("declare queue %s: %w", t, err)
		}
	}
	pub, err := amqp.NewPublisher(cfg, logger)
	if err != nil {
		return err
	}
	defer pub.Close()

	fwd, err := forwarder.New(store, forwarder.Targets{"": pub}, forwarder.Config{}, logger)
	if err != nil {
		return err
	}
	ob, err := publisher.New(store, publisher.Config{Notifier: fwd}, logger)
	if err != nil {
		return err
	}
	fwdCtx, stopFwd := context.WithCancel(ctx)
	fwdDone := make(chan error, 1)
	go func() { fwdDone <- fwd.Run(fwdCtx) }()
	defer func() { stopFwd(); <-fwdDone }()

	// Ten transactions, each with an order event and a payment event of one customer.
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	customers := []string{"alice", "bob"}
	const n = 10
	for i := range n {
		customer := customers[i%2]
		err := ob.WithTx(ctx, func(ctx context.Context, tx *publisher.Tx) error {
			for _, t := range topics {
				msg := message.NewMessage(watermill.NewUUID(), []byte(t))
				msg.Metadata.Set(publisher.MetadataOrderingKey, customer)
				msg.Metadata.Set("run", run)
				msg.Metadata.Set("n", strconv.Itoa(i))
				if err := tx.Publish(t, msg); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	fmt.Printf("committed %d transactions, %d messages\n", n, n*len(topics))

	// Read both queues; per customer, n must rise.
	for _, t := range topics {
		msgs, err := sub.Subscribe(ctx, t)
		if err != nil {
			return err
		}
		last := map[string]int{"alice": -1, "bob": -1}
		got := 0
		for got < n {
			select {
			case m := <-msgs:
				m.Ack()
				if m.Metadata.Get("run") != run {
					continue // left by an earlier, interrupted run
				}
				key := m.Metadata.Get(publisher.MetadataOrderingKey)
				i, _ := strconv.Atoi(m.Metadata.Get("n"))
				if i <= last[key] {
					return fmt.Errorf("%s: %s's message %d after %d", t, key, i, last[key])
				}
				last[key] = i
				got++
			case <-ctx.Done():
				return fmt.Errorf("timed out on queue %s after %d of %d messages", t, got, n)
			}
		}
		fmt.Printf("queue %-24s %d messages, per-customer order held (%s)\n", t, got, strings.Join(customers, ", "))
	}
	fmt.Println("OK: rabbitmq: every committed message arrived, in order per customer")
	return nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
