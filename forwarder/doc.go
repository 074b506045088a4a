// Package forwarder moves rows of an outbox table to Watermill publishers.
//
// A Forwarder is a message.Subscriber over one outbox table: it claims rows and emits
// them as messages with their original UUID, metadata and payload; the row travels in
// the message's context (RowFromContext). Its Handler republishes each message to the
// publisher of the row's transport (Targets) under the row's destination topic. Run both
// in a Watermill router with AddToRouter, so router middleware (Retry, Recoverer,
// Throttle, metrics) applies as to any handler; several forwarders (several tables) fit
// in one router under distinct Config.HandlerName values. Run is the shortcut without
// middleware: it runs the Handler for each message itself, acking or nacking as a
// router would, without a router, which saves the router's cost per message (figures:
// benchmarks/README.md). Use AddToRouter when you want middleware or several handlers
// in one router.
//
//	fwd, err := forwarder.New(store, forwarder.Targets{"": kafkaPub, "amqp": amqpPub}, forwarder.Config{
//		HandlerName: "orders_outbox", // unique per router: one forwarder per outbox table
//	}, logger)
//	pub, err := publisher.New(store, publisher.Config{Notifier: fwd}, logger) // commits wake it
//	_, err = fwd.AddToRouter(router) // handler + a plugin that checks the table's lanes
//	err = router.Run(ctx)            // or fwd.Run(ctx): no middleware, no router, less CPU per message
//
// A forwarder refuses to start (outbox.ErrLaneOutOfRange) when the table holds lane
// values at or above its lane count. While its startup check fails otherwise (a
// database that cannot be reached, tables that do not exist: outbox.ErrSchemaMissing,
// whose text names what to run), it logs the error and retries with backoff; when its
// context ends first, Subscribe and Run return that last error, wrapped with the
// context's. The messages it emits carry outbox.ContextWithForwarded, so
// publisher.Outbox.Handler and Middleware installed router-wide leave them alone.
//
// # Delivery
//
// Delivery is at least once: a row is deleted after its message is acked, so a crash
// between the send and the delete sends it again; consumers dedupe by message UUID.
// An ack deletes a row only when the Handler (or Run) published its message: router
// middleware that acks a message whose publish failed (PoisonQueue, a middleware that
// returns nil for the handler's error) or acks without calling the Handler makes the
// row a failed send, with backoff, attempts and parking as without it, and the
// forwarder logs once which of the two it saw. (With PoisonQueue router-wide, the
// poison topic also gets a copy of every failed attempt: keep it off the forwarder's
// handler.) A subscriber of the forwarder whose own handler publishes, with the Handler
// never made, has its acks trusted.
// A nacked message is failed with exponential backoff (RetryBase·2^(attempts-1), capped
// at RetryMax, ±RetryJitter) and parked after MaxAttempts. A row that cannot be sent at
// all (unknown transport, missing destination, undecodable headers) is parked at once
// with the reason in its last_error; the forwarder keeps going. Database errors back off
// and recover.
//
// # Unordered rows
//
// Rows without an ordering key are claimed in batches (ClaimBatch) by the store's SKIP
// LOCKED / READPAST read, so any number of forwarders share them. Claimers loops claim
// concurrently, sharing a window of InFlight messages in flight: 2, or the number the
// store hints (outbox.ClaimersHint; PostgreSQL hints 3, measured faster there, while
// MariaDB drains faster with 2). A claimer walks a
// backlog with an ID cursor (after a full batch the next claim starts past it) and starts
// from the beginning again at least every PollInterval and after a batch that was not
// full, so rows behind the cursor (retries, late commits, expired claims) are found.
// The cursor exists because on MariaDB a locking read crawls over deleted rows that
// purge has not removed yet: 8.5 ms instead of 2.5 ms per 500-row batch, measured at
// READ COMMITTED right after a delete.
//
// By default (a store implementing outbox.BatchLocker: all three dialects, on SQL Server
// written to the suite but not run against a server) a claimer locks a batch in an open
// transaction instead of writing a token to every row, and deletes the sent rows and
// records the failures in that transaction, with a few batches open at once; rows still
// in flight after a short hold time are handed over to an ordinary claim so that a slow
// message never holds a batch's locks for long (after at most one second, ClaimTTL/4
// when shorter: TestLockingSlowMessageHandedOverToClaim). A handed-over message holds
// its claim and one place of InFlight, never its batch's slot: the next batches lock
// InFlight less the handed-over messages, so a few hung messages do not stop the others
// (TestHungMessagesDoNotStallUnorderedRows). Its defaults are larger
// batches (ClaimBatch 1000, InFlight 4000: a batch's fixed cost weighs more without
// per-row claims).
//
// Run (no router) publishes a locked batch itself: consecutive rows of one transport
// and topic in calls of up to 4 messages, one call after another while each returns
// within 20 µs (a publisher that buffers or hands the message to its client's own
// goroutines gains nothing from concurrency). After the first slower call, or when the
// calls stall for 10 ms (a call that never returns holds up only its own messages),
// the rest of the batch goes concurrently, one message per call: most publishers send a
// call's messages one after another, each with its own round trip, so this puts the
// whole batch on the wire at once. A message is let go as soon as its call returned;
// its outcome waits with its row's ID for the batch's transaction.
//
// With TokenClaims (and with a store that lacks outbox.BatchLocker, a custom
// outbox.Store, for which the forwarder logs the fallback at info level) each batch is
// claimed with a fresh token written to its rows, and no transaction stays open while it
// is sent; acks are coalesced into batched deletes (after CompleteDelay or when a batch
// fills) and claims of rows still in flight are renewed before ClaimTTL runs out. Its
// defaults are ClaimBatch 250 and InFlight 1000. What each mode buys and costs is in the
// TokenClaims field's doc.
//
// # Ordered lanes
//
// Rows with an ordering key live in one of the table's lanes. Lane leases spread the
// lanes over the running forwarders: each forwarder heartbeats into the members table
// every LeaseTTL/3 and aims at its fair share (lanes/K for K live members, one more for
// the first lanes%K members in name order), acquiring free or expired leases (up to 8
// statements at once, as it renews them) and handing surplus lanes over at its next
// membership check. A forwarder that dies loses its lanes
// when its leases expire: its lanes resume about LeaseTTL after a crash.
//
// A lane is read in the order its rows were inserted: a number the database assigns at
// insert (outbox.Record.Seq), and the publisher inserts a transaction's rows at its
// commit, after every lock the transaction waited for. So if transaction B of a key
// began after transaction A of that key committed, or waited for a lock A held (the
// usual way to serialize writers of one aggregate: SELECT ... FOR UPDATE on its row),
// every message of B is delivered after every message of A, whatever process wrote them,
// whatever their clocks, and whether Publish was called before or after the lock wait.
// (A transaction the application owns and flushes itself, Tx.Flush or WithAttached,
// inserts at the flush: flush after the lock wait, as late as possible.)
// Two transactions of one key that overlap, neither waiting for the other, have no
// order to keep: they are delivered in the order of their inserts. An application that
// needs order there serializes its writers on the aggregate's row. (An id, made by the
// writer at Publish, does not give this order: two writers in one millisecond order
// their ULIDs by chance, and a writer whose clock is behind sorts first.)
//
// Under its live lease a lane's worker is the lane's only sender, so it claims nothing:
// it reads the head run of the lane (up to LaneBatch rows, one statement, no writes),
// sends each ordering key's rows of the run in lane order, and deletes the sent rows with
// one statement fenced by the lease token, then reads the next run. The keys of a run do
// not wait for each other: up to KeysInFlight of them are sent at once (a lane holds
// about keys ÷ lanes of them), so that a target that takes time per call (a remote
// broker's round trip, one slow partition) has more than one call per lane on the wire.
// Through a router (AddToRouter) a key's messages are handed over one at a time, each
// after the previous one was acked: a router may run handlers concurrently. Run (no
// router) publishes consecutive rows of one key, transport and topic in one Publish
// call, which Watermill's publishers send in order (a failed call is published again
// one message at a time, so that the failure lands on the row that causes it).
// Watermill's in-memory GoChannel keeps that order only with
// BlockPublishUntilSubscriberAck; without it, it delivers each message in a goroutine of
// its own. KeysInFlight 1 (and StopLaneOnPoison) send a run strictly in lane order, one
// row or Publish call at a time. A head row that is not yet due holds the whole lane:
// ordering beats scheduling, so a row scheduled for later delays the rows written after
// it in its lane.
//
// The guarantee, exactly. Lease expiries are set and compared on one clock, the
// database's: a lease lasts LeaseTTL from the database's now when it was acquired or
// last renewed, and a peer can take the lane over only once the database finds it
// expired. The holder's worker may start a send (a message handed to the router, or a
// Publish call) only before its deadline: the monotonic instant taken just before the
// statement that acquired or last renewed the lease, plus LeaseTTL minus LeaseTTL/10,
// checked before every send. That instant precedes the database's now of the same
// statement, so whatever the wall clocks of the forwarders say (Config.Now may be
// skewed), a holder never starts a send after a peer could have taken its lane, provided
// the holder's monotonic clock does not run slower than the database's by more than a
// tenth. A holder paused past its lease (SIGSTOP, a long GC pause, a VM freeze) sends
// nothing more of that lane when it resumes; a send it had started before the pause
// completes late, and the rows it carries are sent again by the new holder (duplicates,
// never a reordering of first deliveries). Deletes and failures are fenced by the store
// too: a holder whose lease is gone changes no row of the lane, stops the lane, and its
// sent rows are sent again by the lane's next owner (at least once). Duplicates are
// bounded by what was in flight: one run per lane.
//
// A nacked row ends its key's part of the run: the keys of that run already being sent
// go on, and no further key of the run is started (a target outage costs a lane at most
// KeysInFlight attempts per retry). The row is retried after its backoff, holding the
// lane's next runs until it is due. After MaxAttempts it is parked and the lane
// continues, or, with StopLaneOnPoison, the lane stops until the parked row is requeued
// or purged; with HoldParkedKeys only later rows of the parked row's ordering key are
// held.
//
// # Database pool
//
// Lane workers, claimers, completers and the lease manager call the store concurrently
// (with 64 held lanes, dozens at once after a burst of commits). Bound and size the pool
// (db.SetMaxOpenConns and SetMaxIdleConns, e.g. 16 to 32 each): an unbounded pool opens
// and closes connections at every burst and can exhaust the server's connection limit.
//
// # Latency and polling
//
// The Forwarder is an outbox.Notifier: link it to the publisher (same process) and a
// commit wakes the worker of each committed lane held here, and the unordered claimer,
// at once. Polling finds everything else (rows of crashed writers, expired claims,
// scheduled rows coming due, and other processes' commits unless they wake it) every
// PollInterval while rows keep coming, backing off to MaxPollInterval when idle. A
// dropped wake-up only delays a row until the next poll. A wake-up for a lane this
// forwarder does not hold yet (at startup, during a takeover) is kept: the lane's worker
// reads it as soon as the lease is taken. Lanes are polled through a
// scout: one store.PendingLanes probe finds the lanes holding rows and wakes their
// workers, and workers of empty lanes do not poll at all. Idle cost per forwarder: one
// probe and one unordered claim per MaxPollInterval, instead of a claim per lane
// (TestLaneScoutLeavesEmptyLanesAlone: 0 lane claims and 10 probes in an idle second).
//
// # Wake-ups from other processes
//
// When the writers run in other processes (an API writes, a worker forwards), their
// commits reach the forwarder through Config.Wake, an outbox.WakeSource; the writer
// links the matching notifier next to (or instead of) a local forwarder with
// publisher.Config.Notifiers. Both sides coalesce: a writer sends at most one wake-up
// per few milliseconds (the first commit after a quiet spell at once), naming the lanes
// committed since the last one, and a forwarder merges wake-ups that find its workers
// already awake. Which one each dialect supports:
//
//   - PostgreSQL: LISTEN/NOTIFY, no broker needed. Writer: postgres.NewNotifier(db,
//     opts, ...) raises a notification on postgres.Channel(opts) after the commit.
//     Forwarder: Config.Wake = postgres.NewListener(dsn, opts, ...), one dedicated
//     connection (outside the pool) that reconnects with backoff after a drop and wakes
//     every lane once after reconnecting. Where LISTEN cannot work (it is refused, or a
//     transaction-mode pooler such as PgBouncer never delivers: found by a probe
//     notification at each connect) the forwarder logs why, once, and polls.
//     Point the listener at the server or a session-mode pooler.
//   - Any dialect (MariaDB/MySQL, PostgreSQL, SQL Server): wake-up messages over a
//     Watermill Pub/Sub the application already runs (RabbitMQ, NATS, Redis Streams,
//     Kafka, ...). Writer: wakeup.NewNotifier(pub, topic, opts, ...). Forwarder:
//     Config.Wake = wakeup.NewSource(sub, topic, opts, ...), subscribed so that every
//     forwarder process receives every wake-up (a fan-out: a queue per process).
//
// Wake-ups are hints that name lanes, never rows: a lost or failed one (a broker or a
// connection down, a writer that dies right after its commit) only delays its rows until
// the next poll, so polling stays on as the safety net; with wake-ups working,
// PollInterval may be raised to cut idle load. Idle, a forwarder with a PostgreSQL
// listener adds one idle connection (pinged every 30 s) and nothing else to the
// database; a wake-up subscription adds no database load at all. On the test machines a
// commit in one process reaches the target publisher of a forwarder in another in a few
// milliseconds at p50 instead of half the PollInterval (benchmarks/README.md, latency).
//
// # Shutdown
//
// Close (or the router's close) stops claiming, lets messages in flight finish, flushes
// their deletes, gives back the claims of rows it claimed but did not send
// (store.Release, no attempt counted), releases every lane lease and leaves the members
// table, so other forwarders take the lanes over at their next membership check (about
// MaxPollInterval) instead of after LeaseTTL. A lane handed over to another forwarder is
// given up the same way, after its messages in flight settle. All of it is bounded by
// ShutdownTimeout, even with a database that stops answering: at the deadline store
// calls are cancelled, messages still in the handler keep their claims until they
// expire (and may be sent again), and leases not released expire. With row locks (the
// default unordered claims), shortly before the deadline (min(1 s, ShutdownTimeout/4))
// a batch still waiting for messages is rolled back and rows handed over to a claim are
// deleted (acked) or released, each bounded by the deadline, so that Close returns
// within ShutdownTimeout with those rows eligible again at once
// (TestLockingShutdownReleasesOpenBatch, TestLockingHandBackBoundedByShutdownTimeout).
// A target's Publish that never returns (a broker client without a timeout) does not
// hold Close either: the call runs in a goroutine of its own, and at the deadline (or
// once everything else is settled) the lane worker or handler waiting for it gives the
// message up; its row is neither deleted nor failed, and is sent again later
// (TestShutdownBoundedWhenPublishHangs).
//
// Nothing the forwarder puts into a message's context reaches other handlers: a message
// handed to a target carries the row (RowFromContext, for partition keys) but not the
// forwarded mark that publisher.Middleware and the inbox recognise, so a Pub/Sub that
// keeps contexts (gochannel's PreserveContext) hands consumers on the same router no
// mark that would make their middleware skip its transaction
// (TestForwardedMarkStaysInsideTheForwarder).
//
// # Observability
//
// Stats returns counters (sent, failed, parked, in flight, per lane and unordered) and
// the last sample of the backlog (eligible count and oldest eligible row per lane, from
// store.Stats every StatsInterval). Health fails when the oldest eligible row is older
// than a threshold, and with outbox.ErrLaneOutOfRange when rows sit in lanes the
// forwarder's lane count cannot own (a writer with another Lanes started after the
// forwarder; the backlog sampler logs the same at error level). Metrics receives the same figures; package forwarder/prometheus
// adapts them to Prometheus. Logs go through the watermill.LoggerAdapter.
//
// Tests (go test ./forwarder/, MariaDB and PostgreSQL) cover each rule above; end-to-end
// runs over RabbitMQ and Kafka, chaos and benchmarks live in the e2e_* and bench_*
// files (docs/development.md).
package forwarder
