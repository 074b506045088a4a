package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"

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

// The quick start of README.md and of the package doc (doc.go), compiled here so that
// it cannot drift from the API. It needs a database with an orders table, so it has no
// "// Output:" comment and go test only compiles it.
func Example_quickstart() {
	ctx := context.Background()
	logger := watermill.NewStdLogger(false, false)

	// Your database and the outbox tables in it.
	db, err := sql.Open("mysql", os.Getenv("OUTBOX_DSN")) // e.g. app:secret@tcp(127.0.0.1:3306)/shop
	check(err)
	store, err := mysql.New(db, outbox.Options{}) // or postgres.New, sqlserver.New
	check(err)
	check(store.CreateSchema(ctx)) // or mysql.CreateScript in your migrations

	// The forwarder sends committed rows to a broker; the publisher's commits wake it.
	broker := gochannel.NewGoChannel(gochannel.Config{}, logger) // your Kafka, RabbitMQ, ... publisher
	received, err := broker.Subscribe(ctx, "orders.placed")      // stands in for a consumer
	check(err)
	fwd, err := forwarder.New(store, forwarder.Targets{"": broker}, forwarder.Config{}, logger)
	check(err)
	ob, err := publisher.New(store, publisher.Config{Notifier: fwd}, logger)
	check(err)

	// One router runs the forwarder and your handlers, under any middleware.
	router, err := message.NewRouter(message.RouterConfig{}, logger)
	check(err)
	router.AddMiddleware(middleware.Retry{MaxRetries: 3}.Middleware) // PoisonQueue, Timeout, ... alike
	_, err = fwd.AddToRouter(router)
	check(err)
	// ob.Handler puts the transaction inside every middleware, around the handler itself:
	// each Retry attempt is a whole transaction, and a failed one leaves no row, no event.
	router.AddHandler("place-order", "orders.place", broker, "orders.placed", broker,
		ob.Handler(func(msg *message.Message) ([]*message.Message, error) {
			tx, _ := publisher.SQLTxFromContext(msg.Context()) // this call's transaction
			if _, err := tx.ExecContext(msg.Context(), "INSERT INTO orders (id, customer) VALUES (?, ?)", 42, "c-7"); err != nil {
				return nil, err // rolled back: no row, no message
			}
			event := message.NewMessage(watermill.NewUUID(), msg.Payload)
			event.Metadata.Set(publisher.MetadataOrderingKey, "c-7") // this customer's events stay in order
			return []*message.Message{event}, nil                    // stored in the outbox, not published
		}))
	go func() { check(router.Run(ctx)) }()
	defer router.Close()
	<-router.Running()
	check(broker.Publish("orders.place", message.NewMessage(watermill.NewUUID(), []byte(`{"order_id":42}`))))

	// Outside handlers: WithTx (WithAttached for an ORM's transaction) wherever you change data.
	err = ob.WithTx(ctx, func(ctx context.Context, tx *publisher.Tx) error {
		if _, err := tx.SQLTx().ExecContext(ctx, "INSERT INTO orders (id, customer) VALUES (?, ?)", 43, "c-9"); err != nil {
			return err // rolls back: no row, no message
		}
		return tx.Publish("orders.placed", message.NewMessage(watermill.NewUUID(), []byte(`{"order_id":43}`)))
	})
	check(err)

	for range 2 {
		msg := <-received
		fmt.Printf("%s %s\n", msg.Metadata.Get(publisher.MetadataOrderingKey), msg.Payload)
		msg.Ack()
	}
}

// check stops the example on an error.
func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
