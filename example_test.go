package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
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

	// The forwarder: an ordinary router handler that sends committed rows to a broker.
	broker := gochannel.NewGoChannel(gochannel.Config{}, logger) // your Kafka, RabbitMQ, ... publisher
	received, err := broker.Subscribe(ctx, "orders.placed")      // stands in for a consumer
	check(err)
	fwd, err := forwarder.New(store, forwarder.Targets{"": broker}, forwarder.Config{}, logger)
	check(err)
	router, err := message.NewRouter(message.RouterConfig{}, logger)
	check(err)
	_, err = fwd.AddToRouter(router)
	check(err)
	go func() { check(router.Run(ctx)) }()
	defer router.Close()

	// The publisher: its commits wake the forwarder of this process.
	ob, err := publisher.New(store, publisher.Config{Notifier: fwd}, logger)
	check(err)

	// Wherever you change data: the order row and its event commit together, or neither.
	err = ob.WithTx(ctx, func(ctx context.Context, tx *publisher.Tx) error {
		_, err := tx.SQLTx().ExecContext(ctx, "INSERT INTO orders (id, customer) VALUES (?, ?)", 42, "c-7")
		if err != nil {
			return err // rolls back: no row, no message
		}
		msg := message.NewMessage(watermill.NewUUID(), []byte(`{"order_id":42}`))
		msg.Metadata.Set(publisher.MetadataOrderingKey, "c-7") // this customer's events stay in order
		return tx.Publish("orders.placed", msg)                // buffered; the commit writes it
	})
	check(err)

	msg := <-received
	fmt.Printf("%s %s\n", msg.Metadata.Get(publisher.MetadataOrderingKey), msg.Payload)
	msg.Ack()
}

// check stops the example on an error.
func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
