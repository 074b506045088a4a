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
// The DDL creates three tables (the rows, lane leases, forwarder heartbeats) and partial
// indexes for the two hot reads: the head of one lane (pending rows by lane and id) and
// the unordered due rows (pending rows without a lane, by id).
package postgres
