// Package outbox is the shared model and store contract of watermill-outbox, a
// transactional outbox for Watermill.
//
// An application writes its business rows and the messages it wants to send in one
// database transaction (package publisher); a forwarder (package forwarder) later claims
// those rows and republishes them to any Watermill publisher, preserving per-key order
// through lanes (package lanes).
//
// This package holds what every part agrees on: the row ([Record]), its identifiers
// ([ID], [Token]), the options that name one outbox table ([Options]), the sentinel
// errors, the [Store] contract that each SQL dialect (packages mysql, postgres,
// sqlserver) implements, and the [Notifier] through which a committing publisher wakes
// a local forwarder. Package outboxtest runs the whole contract against any Store.
//
// The consumer side: [Inbox] is the optional store capability (implemented by the three
// dialects) that package inbox builds on to give a Watermill handler an exactly-once
// effect: the message UUID recorded per consumer in the handler's own transaction.
//
// All instants are supplied by the caller, so behaviour at every boundary is exact and
// testable; stores keep microsecond precision (SQL Server keeps 100 ns) and return UTC.
//
// # Quick start
//
// The example Example_quickstart (example_test.go; check stops on an error):
//
//	ctx := context.Background()
//	logger := watermill.NewStdLogger(false, false)
//
//	// Your database and the outbox tables in it.
//	db, err := sql.Open("mysql", os.Getenv("OUTBOX_DSN")) // e.g. app:secret@tcp(127.0.0.1:3306)/shop
//	check(err)
//	store, err := mysql.New(db, outbox.Options{}) // or postgres.New, sqlserver.New
//	check(err)
//	check(store.CreateSchema(ctx)) // or mysql.CreateScript in your migrations
//
//	// The forwarder: an ordinary router handler that sends committed rows to a broker.
//	broker := gochannel.NewGoChannel(gochannel.Config{}, logger) // your Kafka, RabbitMQ, ... publisher
//	received, err := broker.Subscribe(ctx, "orders.placed")      // stands in for a consumer
//	check(err)
//	fwd, err := forwarder.New(store, forwarder.Targets{"": broker}, forwarder.Config{}, logger)
//	check(err)
//	router, err := message.NewRouter(message.RouterConfig{}, logger)
//	check(err)
//	_, err = fwd.AddToRouter(router)
//	check(err)
//	go func() { check(router.Run(ctx)) }()
//	defer router.Close()
//
//	// The publisher: its commits wake the forwarder of this process.
//	ob, err := publisher.New(store, publisher.Config{Notifier: fwd}, logger)
//	check(err)
//
//	// Wherever you change data: the order row and its event commit together, or neither.
//	err = ob.WithTx(ctx, func(ctx context.Context, tx *publisher.Tx) error {
//		_, err := tx.SQLTx().ExecContext(ctx, "INSERT INTO orders (id, customer) VALUES (?, ?)", 42, "c-7")
//		if err != nil {
//			return err // rolls back: no row, no message
//		}
//		msg := message.NewMessage(watermill.NewUUID(), []byte(`{"order_id":42}`))
//		msg.Metadata.Set(publisher.MetadataOrderingKey, "c-7") // this customer's events stay in order
//		return tx.Publish("orders.placed", msg)                // buffered; the commit writes it
//	})
//	check(err)
//
//	msg := <-received
//	fmt.Printf("%s %s\n", msg.Metadata.Get(publisher.MetadataOrderingKey), msg.Payload)
//	msg.Ack()
//
// The three ways to use it:
//
//  1. Drop into existing routers and services: package publisher's Outbox is a Watermill
//     message.Publisher bound to your transaction (Begin, WithTx, Attach for an ORM's
//     transaction) and ContextPublisher serves cqrs.EventBus, cqrs.CommandBus and
//     handlers' publisher slots.
//  2. Swap the publisher in handler middleware: publisher.Outbox.Middleware runs each
//     handler call in an outbox transaction and stores the messages it returns.
//  3. Run the forwarder as a router handler: forwarder.Forwarder.AddToRouter (or Run,
//     without a router).
//
// Operations, development and measured figures are in the repository's docs/ and
// benchmarks/README.md.
package outbox
