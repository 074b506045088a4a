// Package postgres is the PostgreSQL dialect of watermill-outbox: an [outbox.Store] over
// a *sql.DB opened with github.com/jackc/pgx/v5/stdlib, and the idempotent DDL that
// deploys its tables ([CreateScript]).
//
//	import (
//		"database/sql"
//
//		_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver
//
//		outbox "github.com/relayer-go/watermill-outbox"
//		"github.com/relayer-go/watermill-outbox/postgres"
//	)
//
//	db, err := sql.Open("pgx", "postgres://app@db:5432/shop?sslmode=verify-full")
//	store, err := postgres.New(db, outbox.Options{Schema: "messaging", TablePrefix: "orders_"})
//
// Applications keep their *sql.DB and *sql.Tx. Tested on PostgreSQL 15 here and in CI;
// PostgreSQL 16 (docker compose up -d --wait postgres) was not run here.
//
// # Schema
//
// [CreateScript] returns idempotent DDL (CREATE SCHEMA IF NOT EXISTS only when Schema is
// set, CREATE TABLE IF NOT EXISTS, CREATE INDEX IF NOT EXISTS): five tables (the rows
// <prefix>outbox, the lane leases <prefix>outbox_lanes, the forwarder heartbeats
// <prefix>outbox_nodes, and package inbox's records <prefix>inbox and cleaner lease
// <prefix>inbox_lease, created whether or not the inbox is used) and partial indexes
// for the two hot reads, the head of one lane (pending rows by lane and id) and the
// unordered due rows (pending rows without a lane, by id), and for parked rows. Run it
// with a migration tool, or call [Store.CreateSchema] (the same script, serialised by
// an advisory lock). Existing tables are never altered. To remove an outbox, drop the
// five tables (DROP TABLE IF EXISTS ... for each; their indexes go with them) and the
// schema if it was created for them. A statement over a table or schema that does not
// exist (42P01, 3F000) returns an error wrapping outbox.ErrSchemaMissing that names this
// fix.
//
// New refuses a pool whose driver is not pgx's database/sql driver (sql.Open("pgx", dsn),
// stdlib.OpenDB, [OpenDB]), lib/pq's included: the store reads pgx's errors (retryable
// failures, stale connections, missing tables) and sends pgx-encoded arrays.
//
// Schema is at most 63 bytes; TablePrefix at most 46 bytes ([MaxTablePrefixBytes]: the
// longest generated name, <prefix>outbox_parkkey_ix, must fit PostgreSQL's 63-byte
// limit, which the server would otherwise truncate silently). Both count bytes, not
// characters; NUL and invalid UTF-8 are refused. Names are always double-quoted
// (embedded quotes doubled), so they are case-sensitive: "Orders_" and "orders_" are
// different tables. Invalid options fail [New] and [CreateScript] with an error wrapping
// outbox.ErrInvalidOptions that names the field.
//
// # DSN and session
//
// Any pgx DSN (URL or keyword form). Instants are timestamptz, bound and returned in UTC
// at microsecond precision whatever the session TimeZone. pgx's default statement cache
// is used: every statement is prepared once per connection. Behind PgBouncer in
// transaction mode, use default_query_exec_mode=exec (or simple_protocol) in the DSN.
//
// # Connector
//
// A pool opened with [OpenDB] (or sql.OpenDB of [WrapConnector] over a pgx stdlib
// connector) is pgx's own with one addition: a transaction that the Store begins with a
// first statement of its own, the inbox record of [Store.BeginRecordInbox]
// (inbox.Inbox.OutboxMiddleware), goes to the server as one pipeline, BEGIN and record
// together (pgx's Batch.BeginTx), instead of a BEGIN that database/sql waits for before
// the record. Every other call is stdlib's unchanged; its driver connection is not a
// *stdlib.Conn, but has the same Conn() *pgx.Conn method for (*sql.Conn).Raw.
//
// # Writes and claims
//
// Insert writes a whole batch inside the caller's transaction in one statement and one
// round trip, whatever the batch size (1 or 10,000 rows): a VALUES list up to 16 rows,
// INSERT ... SELECT FROM unnest of one array per column above, where a column no row of
// the batch uses (lane, ordering_key, transport, message_type, tenant_id, a deliver_at
// other than created_at) sends no array, and a destination or created_at that every row
// shares (as the rows of one Publish call do) goes once, as a scalar. COPY is not used:
// database/sql exposes no raw connection for a *sql.Tx, and it measured no faster. No
// index covers claim_token: the forwarder renews, completes and releases token claims
// by id (a Renew or Release by token alone scans the table), and a claim UPDATE then
// stays a HOT update.
//
// Every other operation (claims, renewals, completions, leases, ...) runs in autocommit
// on the pool. Claims take rows with one UPDATE ... WHERE id = ANY(ARRAY(SELECT ... FOR
// UPDATE SKIP LOCKED)) RETURNING ..., so concurrent forwarders never block one another
// nor the writers; ordered claims check the caller's lane lease in the same statement
// (fencing).
//
// The store also implements [outbox.BatchLocker]: LockBatch runs the unordered claim's
// FOR UPDATE SKIP LOCKED selection in a READ COMMITTED transaction it keeps open, without
// the claim UPDATE; the batch's Finish deletes and fails its rows in that transaction and
// commits.
//
// Keep autovacuum on (the default), or ANALYZE the outbox table after bulk loads: the
// hot statements are checked by EXPLAIN to walk the partial indexes in id order with
// fresh, stale and missing statistics, but the planner is only as good as what it knows.
//
// # Errors
//
// Serialization failures (40001), deadlocks (40P01) and lock-not-available errors
// (55P03) are returned as *outbox.RetryableError (outbox.IsRetryable); the
// *pgconn.PgError stays reachable with errors.As. A pooled connection that the server
// ended while it sat idle (57P01 or 57P02) is recognised (outbox.StaleConnChecker),
// so publisher.Outbox.Begin takes another one.
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
// Tests and benchmarks of this package: docs/development.md.
package postgres
