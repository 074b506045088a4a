// Package inbox makes a Watermill handler's database effects happen exactly once per
// message, although the outbox and the brokers deliver at least once.
//
// # The promise, exactly
//
// A handler wrapped by [Inbox.OutboxMiddleware] (or by [Inbox.Middleware] inside
// publisher's Middleware) runs in one database transaction that
//
//  1. records the incoming message's UUID for the handler's consumer name in the inbox
//     table (<prefix>inbox, primary key consumer + message UUID),
//  2. runs the handler's own writes (through publisher.SQLTxFromContext), and
//  3. stores the handler's outgoing messages in the outbox,
//
// and commits them together. A message whose UUID the consumer has already recorded
// (committed) is acked without running the handler and counted as a duplicate. So,
// however often the broker redelivers a message, and whatever crashes in between:
//
//   - exactly once: every database write the handler makes in that transaction, and
//     the outgoing messages it publishes through the outbox (each stored once; the
//     forwarder then sends them at least once, and the next hop's inbox dedupes them);
//   - NOT exactly once: anything the handler does outside the transaction — HTTP calls,
//     e-mails, writes to another database, messages published straight to a broker. A
//     handler that crashes or rolls back after such a call runs again on redelivery and
//     makes the call again. Make those calls idempotent, or turn them into outbox
//     messages handled by a consumer that is.
//
// Two deliveries of one message at the same time (a redelivery racing a slow first
// attempt, two consumers of one queue) do not both run the handler: the second one's
// insert waits for the first transaction's lock on the key, then sees a duplicate when
// the first committed, or records the message and runs the handler when the first
// rolled back. Two duplicates of one message at once wait for each other too (each
// raises the entry's count). (Under PostgreSQL's REPEATABLE READ or SERIALIZABLE, and
// SQL Server's SNAPSHOT, the second one fails with a serialization error instead, a
// retryable error: the router nacks it and its redelivery is skipped as a duplicate.
// On MySQL/MariaDB three deliveries at once can meet a deadlock when the first rolls
// back: the victim is nacked the same way. A first transaction that holds the key
// longer than the lock wait timeout makes the second fail likewise.) A message without a UUID cannot be deduplicated: the middleware returns
// an error wrapping outbox.ErrNoMessageUUID (the router nacks it) and never runs the
// handler.
//
// # Wiring
//
//	db, err := postgres.OpenDB(dsn)                    // or mysql.OpenDB: the dialect's connector
//	store, err := postgres.New(db, outbox.Options{})
//	out, err := publisher.New(store, publisher.Config{}, logger)
//	in, err := inbox.New(store, inbox.Config{}, logger)
//	router.AddMiddleware(retry, poisonQueue)           // any middleware, any order
//	router.AddConsumerHandler("charge", "orders", sub, in.NoPublishHandler(out, charge))
//
// [Inbox.Handler] ([Inbox.NoPublishHandler] for consumer handlers) wraps the handler
// function itself, innermost, in the transaction that records the message: every
// Watermill middleware sits outside it, so Retry re-runs whole transactions and
// PoisonQueue acks only an attempt that was rolled back (and so not recorded), as
// publisher.Outbox.Handler does. [Inbox.OutboxMiddleware] is the same as a router
// middleware (router.AddMiddleware(in.OutboxMiddleware(out))), under publisher's
// Middleware nesting rule: Retry and PoisonQueue must run outside it, at router level
// before it, never at handler level.
//
// Both begin each handler call's transaction with the message's
// inbox record (outbox.BeginRecordInbox). On a pool opened through the dialect's
// connector (postgres.OpenDB or postgres.WrapConnector, mysql.OpenDB or
// mysql.NewConnector) the BEGIN and the record go to the server together, in one round
// trip: recording costs the handler transaction no round trip of its own. On any other
// pool, and on SQL Server, it is the statement after the BEGIN. Transactions that the
// application begins itself are the driver's own on either pool. The MySQL connector
// turns on the driver's MultiStatements for its connections (mysql.NewConnector says
// what that changes); where that is not wanted, open the pool as usual and accept the
// round trip.
//
// The two middlewares can also be added apart, the inbox's inside publisher's:
//
//	router.AddMiddleware(out.Middleware(), in.Middleware()) // outbox tx first, inbox inside
//
// Order matters then: publisher's Middleware (which opens the transaction) must run
// around the inbox middleware, which otherwise fails with outbox.ErrNoTx; the record is
// the statement after the BEGIN whatever the pool. Retry middleware goes before both,
// as for publisher's Middleware. The consumer name defaults to the router handler's
// name (Config.Consumer changes it): two handlers subscribed to the same topic each
// apply every message once. Renaming a handler starts a new consumer with an empty
// memory.
//
// # Tables
//
// The inbox uses two tables of the store's Options, <prefix>inbox (the records) and
// <prefix>inbox_lease (the cleaners' lease), created with the outbox's three by the
// dialect's Store.CreateSchema, CreateScript and `outboxctl schema apply`: one schema
// step deploys all five tables. Over tables that were never created, the middleware and the
// handlers return an error wrapping outbox.ErrSchemaMissing that names the tables and
// what to run (the router nacks the message; nothing is recorded).
//
// # Retention
//
// Entries older than a window are deleted by a [Cleaner] (Start/Stop, or RunOnce from
// a scheduler) in small batches, by one instance at a time: the instances share a lease
// row in <prefix>inbox_lease. The window is a trade-off: a redelivery that arrives
// later than the window after the first processing is processed again. Choose it
// longer than the longest redelivery delay the brokers and the outbox can produce
// (broker retention, parked outbox rows requeued by an operator, replays); the table
// grows by one row per message per consumer within it (the two keys, a timestamp and
// the primary key and age index entries). WindowDefault is 7 days.
//
// # Cost
//
// Recording is one INSERT in a transaction the handler opens anyway: an insert into the
// primary key and the age index. With OutboxMiddleware on the dialect's connector it
// travels with the BEGIN and adds no round trip; otherwise it is one round trip of its
// own. A duplicate costs one insert attempt that finds the key and raises its count in
// place (MySQL ON DUPLICATE KEY UPDATE, PostgreSQL ON CONFLICT DO UPDATE; SQL Server
// catches the duplicate key and runs one UPDATE by key), then a commit. The table size
// does not slow it down: the insert walks the primary key only (TestExplainInbox in the
// dialect packages). BenchmarkHandlerTx measures the handler transaction with and
// without the inbox, both wirings, and for a duplicate.
//
// # Observability
//
// [Config.Metrics] counts recorded messages and skipped duplicates per consumer;
// [Inbox.Counters] returns the same counts of this process. The table keeps a count too,
// over every process: a duplicate adds one to its entry in the duplicate's transaction,
// so it stands exactly when that transaction commits (a crash before the commit counts
// nothing, and the redelivery that follows is counted instead), and an entry pruned by
// retention takes its count with it. outbox.Inbox.InboxStats returns per consumer the
// entries, their oldest age and the duplicates they skipped, with bounded reads (at most
// outbox.InboxStatsMaxConsumers consumers, outbox.InboxStatsMaxEntries entries of
// each: a larger consumer is Capped and its figures are lower bounds, the table's size
// the engine's estimate); the Cleaner reports them to Metrics after each round, and the
// outboxctl stats command prints them.
package inbox
