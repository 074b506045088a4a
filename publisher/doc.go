// Package publisher is the writing side of the outbox: a Watermill message.Publisher
// bound to a database transaction, so that an application's business rows and the
// messages it sends are committed together or not at all.
//
// # Transactions
//
// An [Outbox] (built by [New] over a dialect's outbox.Store) begins transactions:
//
//   - [Outbox.Begin] on a *sql.DB: the transaction holds one pooled connection and gives
//     it back when it completes;
//   - [Outbox.BeginConn] on a caller-owned *sql.Conn, which stays open afterwards;
//   - [Outbox.Attach] to a *sql.Tx the application (an ORM) already owns;
//   - [Outbox.WithTx], which commits when the function returns nil and rolls back on an
//     error or a panic.
//
// The resulting [Tx] exposes the *sql.Tx for business statements ([Tx.SQLTx]) and is a
// message.Publisher. [Tx.Publish] does no I/O: it copies what it keeps (the metadata,
// encoded with package headercodec, and the payload, in one owned buffer per message)
// and buffers a row. [Tx.Commit] writes every buffered row with the store's bulk insert
// in the same transaction, then commits. [Tx.Flush] writes without committing (the way to
// use an attached transaction). Rollback, a failed insert or a cancelled context
// discards the buffer and rolls the business writes back with it.
//
// Errors worth telling apart, all errors.Is-able:
//
//   - outbox.ErrTxDone: the Tx was already committed or rolled back, or the application
//     completed the *sql.Tx directly, in which case the error says how many buffered
//     messages were NOT written;
//   - outbox.ErrUnknownOutcome: the COMMIT statement failed (for example the connection
//     was lost), so the transaction may or may not be committed; retry with
//     application-level idempotency (consumers dedupe by message UUID);
//   - outbox.ErrInvalidRecord: the store refused a message (a value too long, not
//     UTF-8, ...); nothing was written and the transaction was rolled back.
//
// # Per-message routing
//
// The ordering key (messages with one key are delivered in publish order, through the
// lane lanes.Of(key, Options.Lanes)), the delivery time, the forwarder transport, a
// message type and a tenant come from metadata keys ([MetadataOrderingKey],
// [MetadataDeliverAt], [MetadataTransport], [MetadataMessageType], [MetadataTenantID])
// or from [Config] functions, like watermill-kafka's partition key generator. The
// reserved keys are kept in the stored headers: the forwarder republishes exactly the
// metadata that was published.
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
// # Router middleware
//
// [Outbox.Middleware] runs each handler call of a Watermill router in an outbox
// transaction: the handler finds the transaction in its message context
// ([SQLTxFromContext], [PublisherFromContext], [TxFromContext]); the messages it returns
// are stored in the outbox under the handler's publish topic and the router publishes
// nothing itself. A handler error or panic rolls everything back and Nacks the message.
// It works for handlers added with AddHandler and AddConsumerHandler.
package publisher
