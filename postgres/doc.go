// Package postgres is the PostgreSQL dialect of watermill-outbox: an [outbox.Store] over
// a *sql.DB opened with github.com/jackc/pgx/v5/stdlib, and the idempotent DDL that
// deploys its tables ([CreateScript]).
//
// Applications keep their *sql.DB and *sql.Tx: Insert writes a whole batch inside the
// caller's transaction in one statement and one round trip, whatever the batch size (a
// VALUES list for small batches, INSERT ... SELECT FROM unnest of one array per column
// for larger ones). Every other operation runs in
// autocommit on the pool. Claims take rows with one UPDATE over a FOR UPDATE SKIP LOCKED
// selection, so concurrent forwarders never block one another nor the writers; ordered
// claims check the caller's lane lease in the same statement (fencing).
//
// The store also implements [outbox.BatchLocker]: LockBatch runs the unordered claim's
// FOR UPDATE SKIP LOCKED selection in a READ COMMITTED transaction it keeps open, without
// the claim UPDATE; the batch's Finish deletes and fails its rows in that transaction and
// commits.
//
// Instants are timestamptz, bound and returned in UTC at microsecond precision whatever
// the session TimeZone. Serialization failures (40001), deadlocks (40P01) and lock-not-
// available errors (55P03) are returned as *outbox.RetryableError.
//
// # LISTEN/NOTIFY
//
// A [Notifier] (the writer's side, linked with publisher.Config.Notifiers) raises a
// notification on the table's [Channel] after each commit that wrote rows, carrying the
// committed lanes ("u" for unordered rows, "*" for all): one SELECT pg_notify in
// autocommit on the pool, with synchronous_commit off, at most one per Interval (5 ms;
// up to 50 ms apart while a burst lasts). It is not raised inside the committing
// transaction: a notifying transaction takes PostgreSQL's global notification lock from
// its commit until the end of it, which serialises the writers' commits (their flush to
// disk included); after the commit it costs the writers one small statement every few
// milliseconds at most, and a notification that is lost only delays its rows until the
// next poll.
//
// A [Listener] (the forwarder's Config.Wake) holds one dedicated pgx connection that
// LISTENs on the channel, proves with a probe sent from a second connection that
// notifications arrive, and hands each one to the forwarder, which wakes the workers of
// the notified lanes and the unordered claimers at once. It reconnects with backoff
// after a drop (waking every lane once when it is back), pings a connection that stays
// silent for PingInterval, and where LISTEN cannot work (refused, or a transaction-mode
// pooler such as PgBouncer that never delivers) returns an error wrapping
// outbox.ErrWakeUnavailable that says why: the forwarder logs it and polls, as it does
// anyway as the safety net.
//
// The DDL creates three tables (the rows, lane leases, forwarder heartbeats) and partial
// indexes for the two hot reads: the head of one lane (pending rows by lane and id) and
// the unordered due rows (pending rows without a lane, by id).
package postgres
