package publisher_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	_ "github.com/go-sql-driver/mysql"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/mysql"
	"github.com/relayer-go/watermill-outbox/publisher"
)

// The examples need a database, so they carry no "// Output:" comment (go test would
// run them everywhere). TestExamples runs each one against MariaDB and compares what it
// prints with the text below each example, so they are tested, not just compiled.

// openExample opens the example database and the outbox store with its tables.
func openExample(prefix string) (*sql.DB, *mysql.Store) {
	db, err := sql.Open("mysql", os.Getenv("OUTBOX_TEST_MYSQL_DSN"))
	if err != nil {
		log.Fatal(err)
	}
	store, err := mysql.New(db, outbox.Options{TablePrefix: prefix})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	if err := store.CreateSchema(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+prefix+"orders (id BIGINT PRIMARY KEY, note VARCHAR(200) NOT NULL)"); err != nil {
		log.Fatal(err)
	}
	return db, store
}

// printOutbox prints the rows waiting in the outbox.
func printOutbox(store outbox.Store) {
	ctx := context.Background()
	for lane := outbox.Unordered; lane < store.Options().Lanes; lane++ {
		rows, err := store.Read(ctx, outbox.ReadQuery{Lane: lane, Now: time.Now().Add(time.Hour)}, make([]outbox.Record, 100))
		if err != nil {
			log.Fatal(err)
		}
		for _, r := range rows {
			fmt.Printf("outbox: %s %q key=%q lane=%d\n", r.Destination, r.Body, r.OrderingKey, r.Lane)
		}
	}
}

// Begin a transaction, write a business row through it, publish an event, commit: the
// row and the event are stored together or not at all.
func Example_beginPublishCommit() {
	ctx := context.Background()
	db, store := openExample("example_begin_")
	defer db.Close()

	ob, err := publisher.New(store, publisher.Config{}, watermill.NopLogger{})
	if err != nil {
		log.Fatal(err)
	}
	tx, err := ob.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback() // after Commit it only returns outbox.ErrTxDone

	if _, err := tx.SQLTx().ExecContext(ctx, "INSERT INTO example_begin_orders (id, note) VALUES (?, ?)", 1, "two books"); err != nil {
		log.Fatal(err)
	}
	event := message.NewMessage(watermill.NewUUID(), []byte(`{"order_id":1}`))
	event.Metadata.Set(publisher.MetadataOrderingKey, "customer-42") // same key, same order
	if err := tx.Publish("orders.placed", event); err != nil {
		log.Fatal(err)
	}
	err = tx.Commit(ctx)
	if errors.Is(err, outbox.ErrUnknownOutcome) {
		log.Fatal("connection lost during COMMIT: check whether order 1 exists before retrying")
	}
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("order 1 committed")
	printOutbox(store)
}

const exampleBeginPublishCommitOutput = `order 1 committed
outbox: orders.placed "{\"order_id\":1}" key="customer-42" lane=62
`

// An application whose ORM owns the transaction attaches the outbox to it, publishes,
// and flushes before its own commit.
//
// The outbox needs only the *sql.Tx underneath:
//
//	sqlx:  stx, _ := sqlxDB.BeginTxx(ctx, nil); otx := ob.Attach(stx.Tx)
//	GORM:  db.Transaction(func(g *gorm.DB) error {
//	           otx := ob.Attach(g.Statement.ConnPool.(*sql.Tx)) // PrepareStmt off
//	           ...; return otx.Flush(ctx) // an error makes GORM roll back
//	       })
//	sqlc:  queries.WithTx(sqlTx) and ob.Attach(sqlTx) share one transaction
func Example_flushExistingTx() {
	ctx := context.Background()
	db, store := openExample("example_flush_")
	defer db.Close()
	ob, err := publisher.New(store, publisher.Config{}, nil)
	if err != nil {
		log.Fatal(err)
	}

	sqlTx, err := db.BeginTx(ctx, nil) // the application's (ORM's) transaction
	if err != nil {
		log.Fatal(err)
	}
	defer sqlTx.Rollback()
	otx := ob.Attach(sqlTx)

	if _, err := sqlTx.ExecContext(ctx, "INSERT INTO example_flush_orders (id, note) VALUES (?, ?)", 7, "a lamp"); err != nil {
		log.Fatal(err)
	}
	if err := otx.Publish("orders.placed", message.NewMessage(watermill.NewUUID(), []byte(`{"order_id":7}`))); err != nil {
		log.Fatal(err)
	}
	if err := otx.Flush(ctx); err != nil { // the rows go into sqlTx; nothing is committed yet
		log.Fatal(err)
	}
	if err := sqlTx.Commit(); err != nil { // the application commits as usual
		log.Fatal(err)
	}
	otx.NotifyCommitted() // optional: wakes a forwarder in this process at once
	fmt.Println("order 7 committed by the application")
	printOutbox(store)
}

const exampleFlushExistingTxOutput = `order 7 committed by the application
outbox: orders.placed "{\"order_id\":7}" key="" lane=-1
`

// A router handler that consumes a command, writes to the database and emits an event:
// the middleware runs it in an outbox transaction and stores the event in the outbox
// instead of letting the router publish it.
func Example_middleware() {
	ctx := context.Background()
	db, store := openExample("example_mw_")
	defer db.Close()
	ob, err := publisher.New(store, publisher.Config{}, nil)
	if err != nil {
		log.Fatal(err)
	}

	logger := watermill.NopLogger{}
	// Any subscriber works; Watermill's in-memory one keeps the example self-contained.
	pubSub := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, logger)
	router, err := message.NewRouter(message.RouterConfig{}, logger)
	if err != nil {
		log.Fatal(err)
	}
	// Add middleware that re-runs handlers (Retry) before this one.
	router.AddMiddleware(ob.Middleware())
	// The handler's publisher (pubSub here) is never called: its messages go to the outbox.
	router.AddHandler("place-order", "commands.place_order", pubSub, "orders.placed", pubSub,
		func(msg *message.Message) ([]*message.Message, error) {
			tx, _ := publisher.SQLTxFromContext(msg.Context())
			if _, err := tx.ExecContext(msg.Context(), "INSERT INTO example_mw_orders (id, note) VALUES (?, ?)", 3, string(msg.Payload)); err != nil {
				return nil, err // rolled back and Nacked
			}
			// Other topics: publish through the context's publisher, same transaction.
			audit, _ := publisher.PublisherFromContext(msg.Context())
			if err := audit.Publish("audit", message.NewMessage(watermill.NewUUID(), []byte("order 3 placed"))); err != nil {
				return nil, err
			}
			return []*message.Message{message.NewMessage(watermill.NewUUID(), []byte(`{"order_id":3}`))}, nil
		})
	go func() {
		if err := router.Run(ctx); err != nil {
			log.Fatal(err)
		}
	}()
	<-router.Running()
	defer router.Close()

	// Returns once the handler has acked the command.
	if err := pubSub.Publish("commands.place_order", message.NewMessage(watermill.NewUUID(), []byte("a chair"))); err != nil {
		log.Fatal(err)
	}
	printOutbox(store)
}

const exampleMiddlewareOutput = `outbox: audit "order 3 placed" key="" lane=-1
outbox: orders.placed "{\"order_id\":3}" key="" lane=-1
`
