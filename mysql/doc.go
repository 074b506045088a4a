// Package mysql is the MySQL / MariaDB dialect of watermill-outbox: an [outbox.Store]
// over a *sql.DB opened with github.com/go-sql-driver/mysql, and the DDL of its three
// InnoDB tables ([CreateScript]).
//
// Supported servers are MySQL 8.0.16+ and MariaDB 10.6+ (both have CHECK constraints
// and FOR UPDATE SKIP LOCKED). The store works with any DSN setting of parseTime, loc,
// interpolateParams and clientFoundRows: instants are bound as UTC text formatted by the
// store and read back as text, and no result depends on "rows affected" counting
// unchanged rows. Statements are sent as text with their values inlined (digits, the
// store's own instant text, hex literals for bytes and strings), so each is one round
// trip without server-side prepared statements; only large Insert chunks bind
// parameters.
//
// Deploy the schema with [CreateScript] (idempotent DDL for a migration tool) or
// [Store.CreateSchema]. The DSN must select an existing database unless
// outbox.Options.Schema names one; the store never creates databases.
//
// Every method except Insert runs on its own pooled connection: single statements in
// autocommit, and short READ COMMITTED transactions where a claim locks rows
// (SELECT ... FOR UPDATE SKIP LOCKED, then UPDATE), a claim renewal must count rows
// whose expiry did not change, or a lease is acquired. READ COMMITTED takes no gap
// locks, so a claimer never blocks the writers' inserts. Deadlocks (1213) and lock wait
// timeouts (1205) come back as *outbox.RetryableError; an operation InnoDB picked as a
// deadlock victim first runs again by itself (DeadlockAttempts).
//
// The store also implements [outbox.BatchLocker]: LockBatch runs the unordered claim's
// locking read in a READ COMMITTED transaction it keeps open, without the claim UPDATE;
// the batch's Finish deletes and fails its rows in that transaction and commits.
//
// Insert writes multi-row INSERT statements inside the caller's transaction, chunked
// under the server's max_allowed_packet (read once from the server: MariaDB's default
// is 16 MiB while the driver assumes 64 MiB), under 4 MiB, and under the
// 65,535-placeholder limit of server-side prepared statements.
package mysql
