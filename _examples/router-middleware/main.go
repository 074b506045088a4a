// Command router-middleware shows a Watermill handler that writes to the database and
// emits events through the outbox: publisher.Outbox.Handler wraps the handler function
// in its own transaction, inside every middleware, and swaps the router's direct
// publish for the outbox. (publisher.Outbox.Middleware does the same as a router
// middleware, under the nesting rule in its doc: Retry and PoisonQueue must then run
// outside it. With Handler there is no rule to follow.)
//
// One router runs three handlers:
//
//	place_order       commands -> orders table + OrderPlaced (returned) + AuditLog
//	                  (published through the context), all in one transaction
//	outbox_forwarder  outbox table -> events Pub/Sub
//	print_events      events -> stdout
//
// A PlaceOrder command with a negative amount makes the handler fail after its INSERT:
// its transaction rolls back (no order row, no event), Retry tries again (each attempt a
// whole transaction), and then PoisonQueue sets the command aside.
//
//	go run ./_examples/router-middleware -dsn 'root@tcp(127.0.0.1:3306)/test'
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	_ "github.com/go-sql-driver/mysql"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/forwarder"
	"github.com/relayer-go/watermill-outbox/mysql"
	"github.com/relayer-go/watermill-outbox/publisher"
)

type PlaceOrder struct {
	OrderID     string `json:"order_id"`
	Customer    string `json:"customer"`
	AmountCents int64  `json:"amount_cents"`
}

func main() {
	dsn := flag.String("dsn", envOr("OUTBOX_DSN", "root@tcp(127.0.0.1:3306)/test"), "MySQL/MariaDB DSN (env OUTBOX_DSN)")
	prefix := flag.String("prefix", "routermw_", "table prefix (letters, digits, underscores)")
	timeout := flag.Duration("timeout", 30*time.Second, "give up after this long")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := run(ctx, *dsn, *prefix); err != nil {
		fmt.Fprintln(os.Stderr, "router-middleware:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, dsn, prefix string) error {
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
	orders := "`" + prefix + "orders`"
	if _, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+orders+
		" (id VARCHAR(64) PRIMARY KEY, customer VARCHAR(64) NOT NULL, amount_cents BIGINT NOT NULL)"); err != nil {
		return err
	}

	// In-memory Pub/Subs stand in for the brokers: commands come in on one, the
	// forwarder publishes events to the other. Publish blocks until the subscriber acks,
	// so that each keeps the order of publishing, as a broker's partition or queue does
	// (gochannel otherwise hands concurrent publishes over in any order).
	commands := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, logger)
	events := gochannel.NewGoChannel(gochannel.Config{Persistent: true, BlockPublishUntilSubscriberAck: true}, logger)

	fwd, err := forwarder.New(store, forwarder.Targets{"": events}, forwarder.Config{}, logger)
	if err != nil {
		return err
	}
	ob, err := publisher.New(store, publisher.Config{Notifier: fwd}, logger)
	if err != nil {
		return err
	}

	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, logger)
	if err != nil {
		return err
	}
	router.AddMiddleware(middleware.Recoverer)

	// The business handler: its writes and its events commit together.
	h := router.AddHandler("place_order", "commands", commands, "orders.placed", events,
		ob.Handler(func(msg *message.Message) ([]*message.Message, error) {
			var cmd PlaceOrder
			if err := json.Unmarshal(msg.Payload, &cmd); err != nil {
				return nil, err
			}
			tx, _ := publisher.SQLTxFromContext(msg.Context())
			if _, err := tx.ExecContext(msg.Context(), "INSERT INTO "+orders+" (id, customer, amount_cents) VALUES (?, ?, ?)",
				cmd.OrderID, cmd.Customer, cmd.AmountCents); err != nil {
				return nil, err
			}
			if cmd.AmountCents < 0 {
				// After the INSERT on purpose: the rollback takes the row with it.
				return nil, fmt.Errorf("order %s: negative amount", cmd.OrderID)
			}
			// Another topic, same transaction.
			audit, _ := publisher.PublisherFromContext(msg.Context())
			entry := message.NewMessage(watermill.NewUUID(), []byte("order "+cmd.OrderID+" placed"))
			entry.Metadata.Set("order_id", cmd.OrderID)
			if err := audit.Publish("audit.log", entry); err != nil {
				return nil, err
			}
			// The returned event goes into the outbox under the handler's publish topic
			// ("orders.placed"); the router itself publishes nothing.
			event := message.NewMessage(watermill.NewUUID(), msg.Payload)
			event.Metadata.Set(publisher.MetadataOrderingKey, cmd.Customer)
			event.Metadata.Set("order_id", cmd.OrderID)
			return []*message.Message{event}, nil
		}))
	poison, err := middleware.PoisonQueue(events, "commands.poison")
	if err != nil {
		return err
	}
	// Handler-level here (router-level works the same): the transaction is inside both,
	// so each Retry attempt is a whole transaction and PoisonQueue takes only a command
	// whose every attempt was rolled back.
	h.AddMiddleware(
		poison,
		middleware.Retry{MaxRetries: 2, InitialInterval: 10 * time.Millisecond}.Middleware,
	)

	if _, err := fwd.AddToRouter(router); err != nil {
		return err
	}

	runID := fmt.Sprintf("%d", time.Now().UnixNano())
	var mu sync.Mutex
	seen := map[string][]string{}
	allIn := make(chan struct{})
	want := map[string]int{"orders.placed": 2, "audit.log": 2, "commands.poison": 1}
	for topic := range want {
		router.AddConsumerHandler("print_"+strings.ReplaceAll(topic, ".", "_"), topic, events, func(msg *message.Message) error {
			id := msg.Metadata.Get("order_id")
			if topic == "commands.poison" {
				var cmd PlaceOrder
				_ = json.Unmarshal(msg.Payload, &cmd)
				id = cmd.OrderID
			}
			if !strings.HasPrefix(id, runID+"-") {
				return nil // left in the table by an earlier, interrupted run
			}
			fmt.Printf("received %-16s order %s\n", topic, id)
			mu.Lock()
			defer mu.Unlock()
			seen[topic] = append(seen[topic], id)
			for t, n := range want {
				if len(seen[t]) < n {
					return nil
				}
			}
			select {
			case <-allIn:
			default:
				close(allIn)
			}
			return nil
		})
	}

	routerCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- router.Run(routerCtx) }()
	select {
	case <-router.Running():
	case err := <-done:
		return err
	}

	run := runID
	cmds := []PlaceOrder{
		{OrderID: run + "-1", Customer: "alice", AmountCents: 1200},
		{OrderID: run + "-2", Customer: "bob", AmountCents: -5},
		{OrderID: run + "-3", Customer: "alice", AmountCents: 800},
	}
	for _, c := range cmds {
		payload, _ := json.Marshal(c)
		if err := commands.Publish("commands", message.NewMessage(watermill.NewUUID(), payload)); err != nil {
			return err
		}
	}

	select {
	case <-allIn:
	case <-ctx.Done():
		mu.Lock()
		defer mu.Unlock()
		return fmt.Errorf("timed out; received %v", seen)
	}
	stop()
	<-done

	var bad int
	if err := db.QueryRowContext(context.Background(), "SELECT COUNT(*) FROM "+orders+" WHERE id = ?", cmds[1].OrderID).Scan(&bad); err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	var problems []string
	if bad != 0 {
		problems = append(problems, "the failed command's order row exists")
	}
	// OrderPlaced events share alice's ordering key: they arrive in order. Audit entries
	// have no key (unordered rows are sent concurrently): any order.
	audit := slices.Sorted(slices.Values(seen["audit.log"]))
	for t, got := range map[string][]string{"orders.placed": seen["orders.placed"], "audit.log": audit} {
		if strings.Join(got, ",") != cmds[0].OrderID+","+cmds[2].OrderID {
			problems = append(problems, fmt.Sprintf("%s: got %v", t, seen[t]))
		}
	}
	if len(seen["commands.poison"]) != 1 || seen["commands.poison"][0] != cmds[1].OrderID {
		problems = append(problems, fmt.Sprintf("poison queue: got %v", seen["commands.poison"]))
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	fmt.Println("OK: router-middleware: events of committed handler calls delivered, the failed call left no row and no event")
	return nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
