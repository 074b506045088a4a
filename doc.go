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
//	// The forwarder sends committed rows to a broker; the publisher's commits wake it.
//	broker := gochannel.NewGoChannel(gochannel.Config{}, logger) // your Kafka, RabbitMQ, ... publisher
//	received, err := broker.Subscribe(ctx, "orders.placed")      // stands in for a consumer
//	check(err)
//	fwd, err := forwarder.New(store, forwarder.Targets{"": broker}, forwarder.Config{}, logger)
//	check(err)
//	ob, err := publisher.New(store, publisher.Config{Notifier: fwd}, logger)
//	check(err)
//
//	// One router runs the forwarder and your handlers, under any middleware.
//	router, err := message.NewRouter(message.RouterConfig{}, logger)
//	check(err)
//	router.AddMiddleware(middleware.Retry{MaxRetries: 3}.Middleware) // PoisonQueue, Timeout, ... alike
//	_, err = fwd.AddToRouter(router)
//	check(err)
//	// ob.Handler puts the transaction inside every middleware, around the handler itself:
//	// each Retry attempt is a whole transaction, and a failed one leaves no row, no event.
//	router.AddHandler("place-order", "orders.place", broker, "orders.placed", broker,
//		ob.Handler(func(msg *message.Message) ([]*message.Message, error) {
//			tx, _ := publisher.SQLTxFromContext(msg.Context()) // this call's transaction
//			if _, err := tx.ExecContext(msg.Context(), "INSERT INTO orders (id, customer) VALUES (?, ?)", 42, "c-7"); err != nil {
//				return nil, err // rolled back: no row, no message
//			}
//			event := message.NewMessage(watermill.NewUUID(), msg.Payload)
//			event.Metadata.Set(publisher.MetadataOrderingKey, "c-7") // this customer's events stay in order
//			return []*message.Message{event}, nil                    // stored in the outbox, not published
//		}))
//	go func() { check(router.Run(ctx)) }()
//	defer router.Close()
//	<-router.Running()
//	check(broker.Publish("orders.place", message.NewMessage(watermill.NewUUID(), []byte(`{"order_id":42}`))))
//
//	// Outside handlers: WithTx (WithAttached for an ORM's transaction) wherever you change data.
//	err = ob.WithTx(ctx, func(ctx context.Context, tx *publisher.Tx) error {
//		if _, err := tx.SQLTx().ExecContext(ctx, "INSERT INTO orders (id, customer) VALUES (?, ?)", 43, "c-9"); err != nil {
//			return err // rolls back: no row, no message
//		}
//		return tx.Publish("orders.placed", message.NewMessage(watermill.NewUUID(), []byte(`{"order_id":43}`)))
//	})
//	check(err)
//
//	for range 2 {
//		msg := <-received
//		fmt.Printf("%s %s\n", msg.Metadata.Get(publisher.MetadataOrderingKey), msg.Payload)
//		msg.Ack()
//	}
//
// The three ways to use it:
//
//  1. Wrap router handlers: publisher.Outbox.Handler (NoPublishHandler for consumer
//     handlers, HandleInTx for the cqrs processors' OnHandle) runs each handler call in
//     an outbox transaction inside every Watermill middleware, so Retry re-runs whole
//     transactions and PoisonQueue acks only calls that were rolled back; the messages
//     the handler returns or publishes through its context are stored in the outbox.
//     (publisher.Outbox.Middleware does the same router-wide, under a nesting rule.)
//  2. Publish from any code: WithTx, WithAttached for an ORM's transaction, and
//     ContextPublisher for cqrs.EventBus, cqrs.CommandBus and handlers' publisher slots.
//  3. Run the forwarder as a router handler: forwarder.Forwarder.AddToRouter (or Run,
//     without a router); an ack that a middleware gave without a publish is a failure.
//
// A missing table is an error wrapping [ErrSchemaMissing] that names the tables and
// what to run (Store.CreateSchema, outboxctl schema apply, or CreateScript).
//
// Operations, development and measured figures are in the repository's docs/ and
// benchmarks/README.md.
package outbox
