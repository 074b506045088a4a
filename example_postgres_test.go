package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/forwarder"
	"github.com/relayer-go/watermill-outbox/postgres"
	"github.com/relayer-go/watermill-outbox/publisher"
)

// The quick start on PostgreSQL: Example_quickstart with pgx's database/sql driver,
// postgres.New and $n placeholders (README.md shows the lines that differ). Compiled
// only, as Example_quickstart.
func Example_quickstartPostgres() {
	ctx := context.Background()
	logger := watermill.NewStdLogger(false, false)

	// Your database and the outbox tables in it.
	db, err := sql.Open("pgx", os.Getenv("OUTBOX_DSN")) // e.g. postgres://app:secret@127.0.0.1:5432/shop
	check(err)
	store, err := postgres.New(db, outbox.Options{}) // pgx's database/sql driver only
	check(err)
	check(store.CreateSchema(ctx)) // or postgres.CreateScript in your migrations

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
			if _, err := tx.ExecContext(msg.Context(), "INSERT INTO orders (id, customer) VALUES ($1, $2)", 42, "c-7"); err != nil {
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
		if _, err := tx.SQLTx().ExecContext(ctx, "INSERT INTO orders (id, customer) VALUES ($1, $2)", 43, "c-9"); err != nil {
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
