// Command cqrs shows Watermill's components/cqrs on the outbox with the safe wiring: a
// command handler's database writes and the events it publishes commit in one
// transaction, or neither, whatever middleware the router runs.
//
//   - CommandBus: commands travel over a Pub/Sub as usual (an in-memory one here);
//   - the command processor's OnHandle runs each handler call in ob.HandleInTx: the
//     transaction is innermost, inside every router and handler middleware, so Retry
//     re-runs whole transactions and PoisonQueue (or AckCommandHandlingErrors) acks only
//     a call that was rolled back;
//   - EventBus over ob.ContextPublisher(): the handler's EventBus.Publish(ctx, event)
//     goes into the transaction that ctx carries, never straight to a broker;
//   - the forwarder, on the same router under the same router-wide middleware, sends
//     the committed events to the events Pub/Sub, where an event processor handles them.
//
// A PlaceOrder with a negative amount fails after its INSERT and its EventBus.Publish:
// the program checks that it left no order row and that no OrderPlaced event for it was
// ever sent. With -ack-command-errors the processor's AckCommandHandlingErrors acks the
// failed command instead of the PoisonQueue: it is gone, and nothing of it committed.
//
//	go run ./_examples/cqrs -dsn 'root@tcp(127.0.0.1:3306)/test'
//	go run ./_examples/cqrs -db postgres -dsn 'postgres://postgres@127.0.0.1:5432/test?sslmode=disable'
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/mysql"
	"github.com/relayer-go/watermill-outbox/postgres"
)

// PlaceOrder is the command.
type PlaceOrder struct {
	OrderID     string `json:"order_id"`
	Customer    string `json:"customer"`
	AmountCents int64  `json:"amount_cents"`
}

// OrderPlaced is the event the command handler publishes.
type OrderPlaced struct {
	OrderID string `json:"order_id"`
}

func main() {
	dbKind := flag.String("db", "mysql", "mysql or postgres")
	dsn := flag.String("dsn", envOr("OUTBOX_DSN", "root@tcp(127.0.0.1:3306)/test"), "database DSN (env OUTBOX_DSN)")
	prefix := flag.String("prefix", "cqrs_", "table prefix (letters, digits, underscores)")
	ackErrors := flag.Bool("ack-command-errors", false, "set CommandProcessorConfig.AckCommandHandlingErrors instead of a PoisonQueue")
	timeout := flag.Duration("timeout", 30*time.Second, "give up after this long")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := run(ctx, *dbKind, *dsn, *prefix, *ackErrors); err != nil {
		fmt.Fprintln(os.Stderr, "cqrs:", err)
		os.Exit(1)
	}
}

// app is the running program: its database, outbox and what the event handler saw.
type app struct {
	db     *sql.DB
	orders string              // quoted table name
	quote  func(string) string // quotes a table name
	ph     func(int) string
	store  outbox.Store

	mu       sync.Mutex
	placed   []string       // OrderPlaced events delivered by the forwarder
	poisoned []string       // commands the PoisonQueue set aside
	attempts map[string]int // handler calls per order
}

func run(ctx context.Context, dbKind, dsn, prefix string, ackErrors bool) error {
	a, err := open(ctx, dbKind, dsn, prefix)
	if err != nil {
		return err
	}
	defer a.db.Close()
	logger := watermill.NopLogger{}
	commands := gochannel.NewGoChannel(gochannel.Config{}, logger)
	events := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, logger)
	router, commandBus, err := a.wire(commands, events, ackErrors)
	if err != nil {
		return err
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

	runID := fmt.Sprint(time.Now().UnixNano())
	cmds := []PlaceOrder{
		{OrderID: runID + "-1", Customer: "alice", AmountCents: 1200},
		{OrderID: runID + "-2", Customer: "bob", AmountCents: -5}, // fails after its INSERT and its event
		{OrderID: runID + "-3", Customer: "carol", AmountCents: 800},
	}
	for _, c := range cmds {
		if err := commandBus.Send(ctx, &c); err != nil {
			return err
		}
	}
	wantPoisoned := 1
	if ackErrors {
		wantPoisoned = 0
	}
	if err := a.waitFor(ctx, runID, 2, wantPoisoned); err != nil {
		return err
	}
	stop()
	if err := <-done; err != nil {
		return err
	}
	return a.verify(runID, cmds, ackErrors)
}

// open connects, deploys the outbox tables and the orders table.
func open(ctx context.Context, dbKind, dsn, prefix string) (*app, error) {
	a := &app{attempts: map[string]int{}}
	var store outbox.Store
	var err error
	switch dbKind {
	case "mysql":
		a.db, err = sql.Open("mysql", dsn)
		if err == nil {
			store, err = mysql.New(a.db, outbox.Options{TablePrefix: prefix})
		}
		a.quote, a.ph = func(t string) string { return "`" + t + "`" }, func(int) string { return "?" }
	case "postgres":
		a.db, err = sql.Open("pgx", dsn)
		if err == nil {
			store, err = postgres.New(a.db, outbox.Options{TablePrefix: prefix})
		}
		a.quote, a.ph = func(t string) string { return `"` + t + `"` }, func(n int) string { return fmt.Sprintf("$%d", n) }
	default:
		return nil, fmt.Errorf("-db %q: want mysql or postgres", dbKind)
	}
	if err != nil {
		return nil, err
	}
	a.orders = a.quote(prefix + "orders")
	a.db.SetMaxOpenConns(16)
	a.db.SetMaxIdleConns(16)
	if err := store.CreateSchema(ctx); err != nil {
		return nil, err
	}
	if _, err := a.db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+a.orders+
		" (id VARCHAR(64) PRIMARY KEY, customer VARCHAR(64) NOT NULL, amount_cents BIGINT NOT NULL)"); err != nil {
		return nil, err
	}
	a.store = store
	return a, nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
