// Package publisher is the writing side of the outbox: a Watermill message.Publisher
// bound to a database transaction, so that an application's business rows and the
// messages it sends are committed together or not at all.
//
// # Transactions
//
//	store, _ := mysql.New(db, outbox.Options{})          // or postgres.New(db, ...)
//	ob, err := publisher.New(store, publisher.Config{}, logger)
//
//	tx, err := ob.Begin(ctx)                             // or ob.BeginConn(ctx, conn)
//	defer tx.Rollback()                                  // no-op (ErrTxDone) after Commit
//	_, err = tx.SQLTx().ExecContext(ctx, "INSERT INTO orders ...")
//	msg := message.NewMessage(watermill.NewUUID(), payload)
//	msg.Metadata.Set(publisher.MetadataOrderingKey, "customer-42")
//	err = tx.Publish("orders.placed", msg)               // no I/O: buffered
//	err = tx.Commit(ctx)                                 // bulk insert + COMMIT
//
// An [Outbox] (built by [New] over a dialect's outbox.Store) begins transactions:
//
//   - [Outbox.Begin] on the store's own database (outbox.Store.DB): the transaction
//     holds one pooled connection and gives it back when it completes; a pooled
//     connection the server closed while it sat idle fails the BEGIN before anything was
//     sent, and Begin then takes another connection once (the store says which errors
//     mean that: outbox.StaleConnChecker);
//   - [Outbox.BeginDB] on another pool than the store's (the tables must be the
//     store's); [Outbox.WithTxDB] and [Outbox.MiddlewareDB] likewise;
//   - [Outbox.BeginConn] on a caller-owned *sql.Conn (session settings, temporary
//     tables, advisory locks), which stays open afterwards;
//   - [Outbox.WithAttached] for a *sql.Tx the application (an ORM) already owns: it
//     attaches, runs the function (whose ctx carries the attached transaction for
//     ContextPublisher) and flushes what it published into the application's
//     transaction when it returns nil; the application then commits, and
//     [Tx.NotifyCommitted] wakes the local forwarder.
//     sqlx: ob.WithAttached(ctx, stx.Tx, fn) before stx.Commit();
//     GORM: ob.WithAttached(ctx, g.Statement.ConnPool.(*sql.Tx), fn) inside
//     db.Transaction. [Outbox.Attach] and [Outbox.AttachContext] are the parts it is
//     made of (Publish, then Flush before the commit); messages published after the
//     last Flush are not committed, and NotifyCommitted returns an error wrapping
//     outbox.ErrNotFlushed that counts them, rather than losing them silently;
//   - [Outbox.WithTx], which commits when the function returns nil and rolls back on an
//     error or a panic (re-panicking after the rollback); the ctx it passes carries the
//     Tx ([TxFromContext], [SQLTxFromContext], [PublisherFromContext]).
//
// Config.TxOptions sets the isolation level of Begin and BeginConn; read-only is
// refused. [Outbox.Stats] counts the transactions begun and committed.
//
// The resulting [Tx] exposes the *sql.Tx for business statements ([Tx.SQLTx]) and is a
// message.Publisher. [Tx.Publish] does no I/O: it copies what it keeps (the metadata,
// encoded with package headercodec, and the payload, in one owned buffer per message:
// one allocation) and buffers a row; it is safe for concurrent use and buffers all
// messages of a call or none. [Tx.Commit] writes every buffered row with the store's
// bulk insert in the same transaction, then commits. [Tx.Flush] writes without
// committing (the way to use an attached transaction). Rollback, a failed insert (also
// a database-level one such as a CHECK violation) or a cancelled context discards the
// buffer and rolls the business writes back with it.
//
// Errors worth telling apart, all errors.Is-able:
//
//   - outbox.ErrTxDone: the Tx was already committed or rolled back (a second Commit or
//     Rollback, a Publish afterwards), or the application
//     completed the *sql.Tx directly, in which case the error says how many buffered
//     messages were NOT written, and that those Flush had written went with the
//     application's commit or rollback;
//   - outbox.ErrUnknownOutcome: the COMMIT statement failed (for example the connection
//     was lost, or the server killed the session), so the transaction may or may not be
//     committed; the driver's error is wrapped too; retry the unit of work with
//     application-level idempotency (consumers dedupe by message UUID). Tested by
//     killing the session from another connection right before COMMIT (MariaDB KILL,
//     PostgreSQL pg_terminate_backend);
//   - outbox.ErrSchemaMissing: the outbox table does not exist; the error names the
//     tables and what to run (store.CreateSchema, `outboxctl schema apply` with the
//     prefix, or the dialect's CreateScript);
//   - outbox.ErrNotFlushed: NotifyCommitted of an attached transaction found messages
//     published after its last Flush, which are not in the committed transaction;
//   - outbox.ErrInvalidRecord: the store refused a message (a value too long, not
//     UTF-8, ...); nothing was written and the transaction was rolled back.
//
// # Per-message routing
//
// The ordering key, the delivery time, the forwarder transport, a message type and a
// tenant come from metadata keys or from [Config] functions (topic, message) → value,
// like watermill-kafka's partition key generator:
//
//	metadata key          Config field   meaning
//	outbox_ordering_key   OrderingKey    same key = same lane = publish order; empty = unordered (NULL lane)
//	outbox_deliver_at     DeliverAt      RFC 3339 (SetDeliverAt); not sent before
//	outbox_transport      Transport      which forwarder target publisher ("" = default)
//	outbox_message_type   MessageType    optional stable type name
//	outbox_tenant_id      TenantID       optional tenant
//
// ([MetadataOrderingKey], [MetadataDeliverAt], [MetadataTransport],
// [MetadataMessageType], [MetadataTenantID].) Messages with one key are delivered in
// publish order, through the lane lanes.Of(key, Options.Lanes). Two transactions that
// publish the same key at the same time (from different requests or processes) are not
// ordered between each other: publish a key's messages from one sequence of
// transactions. The reserved keys are kept in the stored headers: the forwarder
// republishes exactly the metadata that was published.
//
// The lane count comes from the store's Options; every writer and forwarder of a table
// must use the same Options (the forwarder refuses lanes it cannot own).
//
// # Waking the forwarder
//
// After a successful commit, a Config.Notifier (the forwarder of the same table in this
// process) is told which lanes and how many unordered rows were committed, so that it
// sends them at once rather than at its next poll. A notifier for another table is
// refused by New (outbox.ErrNotifierMismatch); a full, slow or panicking notifier never
// fails a committed transaction. Config.Notifiers adds more, for forwarders in other
// processes: postgres.Notifier (LISTEN/NOTIFY) or wakeup.Notifier (wake-up messages over
// any Watermill Pub/Sub); see the forwarder package's "Wake-ups from other processes".
//
// # Router handlers
//
//	router.AddMiddleware(middleware.Retry{...}.Middleware, poisonQueue) // any middleware, any order
//	router.AddHandler("place-order", "commands", sub, "orders.placed", pub,
//		ob.Handler(func(msg *message.Message) ([]*message.Message, error) {
//			tx, _ := publisher.SQLTxFromContext(msg.Context())        // business writes
//			audit, _ := publisher.PublisherFromContext(msg.Context()) // other topics
//			...
//			return []*message.Message{event}, nil // stored in the outbox, not published
//		}))
//
// [Outbox.Handler] wraps the handler function itself in an outbox transaction on the
// store's database, innermost: every router- and handler-level middleware sits outside
// it. The handler finds the transaction in its message context ([SQLTxFromContext],
// [PublisherFromContext], [TxFromContext]); the messages it returns are stored in the
// outbox under the handler's publish topic (message.PublishTopicFromCtx), the commit
// happens, and the router publishes nothing itself. A handler error or panic (a
// *[PanicError]) rolls everything back and is returned. Because the transaction is
// inside them, Retry re-runs whole transactions and PoisonQueue (or any middleware
// that turns an error into an ack) acks only a call that was rolled back: no wiring
// commits a failed call. [Outbox.NoPublishHandler] is the same for AddConsumerHandler.
//
// Watermill's components/cqrs runs its handlers through the processors' OnHandle hook,
// the innermost place: [Outbox.HandleInTx] there makes each command or event handler
// call one transaction, and an EventBus over [Outbox.ContextPublisher] publishes the
// handler's events into it:
//
//	eventBus, _ := cqrs.NewEventBusWithConfig(ob.ContextPublisher(), cqrs.EventBusConfig{...})
//	cqrs.CommandProcessorConfig{
//		OnHandle: func(p cqrs.CommandProcessorOnHandleParams) error {
//			return ob.HandleInTx(p.Message, func(ctx context.Context) error {
//				return p.Handler.Handle(ctx, p.Command) // SQLTxFromContext(ctx); eventBus.Publish(ctx, ...)
//			})
//		},
//		...
//	}
//
// CommandProcessorConfig.AckCommandHandlingErrors then acks a failed command after its
// transaction rolled back: the command is dropped (logged by the processor), nothing of
// it committed. (_examples/cqrs runs both, tested on MariaDB and PostgreSQL.)
//
// [Outbox.Middleware] does the same as a router middleware, for those who want one
// line per router. It is safe only under its nesting rule (in its doc): whatever runs
// inside it runs inside its transaction, so a Retry or PoisonQueue added at handler
// level, or after it, keeps or commits a failed attempt's writes and messages, and so
// does cqrs's AckCommandHandlingErrors. Messages a forwarder emitted pass through
// Handler and Middleware untouched, without a transaction, so both may run on the
// router that also runs the forwarder. Package inbox's Inbox.Handler adds the inbox's
// deduplication to the same transaction.
//
// # One publisher for the whole application
//
// [Outbox.ContextPublisher] is a message.Publisher that lives as long as the application
// and publishes each message into the outbox transaction its context carries: hand it
// to cqrs.EventBus and cqrs.CommandBus, a handler's publisher slot, or service structs.
// The transaction comes from Handler, HandleInTx, the Middleware, WithTx, or
// WithAttached/AttachContext; a message whose
// context carries none fails with an error wrapping outbox.ErrNoTransaction, and is
// never published directly to a broker.
package publisher
