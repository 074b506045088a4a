// Package mysql is the MySQL / MariaDB dialect of watermill-outbox: an [outbox.Store]
// over a *sql.DB opened with github.com/go-sql-driver/mysql, and the DDL of its three
// InnoDB tables ([CreateScript]).
//
//	import (
//		"database/sql"
//
//		_ "github.com/go-sql-driver/mysql" // registers the "mysql" driver
//
//		outbox "github.com/relayer-go/watermill-outbox"
//		"github.com/relayer-go/watermill-outbox/mysql"
//	)
//
//	db, err := sql.Open("mysql", "app:secret@tcp(db:3306)/shop")
//	store, err := mysql.New(db, outbox.Options{TablePrefix: "orders_"})
//
// # Servers
//
// Supported servers are MySQL 8.0.16+ and MariaDB 10.6+ (both have CHECK constraints
// and FOR UPDATE SKIP LOCKED). CI runs every MySQL test on both engines: MariaDB 10.11
// (port 3306) and Oracle MySQL 9.7 (port 3307; Debian unstable's mysql-server-core in a
// debootstrap root that scripts/services mysql-oracle builds). MySQL 8.0 and 8.4 were
// not run here (8.4 is in docker-compose.yml).
//
// # Schema
//
// Deploy the schema with [CreateScript] (idempotent DDL for a migration tool: five
// CREATE TABLE IF NOT EXISTS statements, each ending in ";") or [Store.CreateSchema],
// which runs the statements one by one (no multiStatements needed). The five tables are
// the rows table <prefix>outbox (InnoDB, utf8mb4, BINARY(16) ids and claim tokens,
// DATETIME(6) UTC instants, the CHECK constraints of the row model), the lane leases
// <prefix>outbox_lanes, the forwarder heartbeats <prefix>outbox_nodes, and package
// inbox's records <prefix>inbox and cleaner lease <prefix>inbox_lease (created whether
// or not the inbox is used). Existing tables are never altered; databases are never
// created: the DSN must select an existing database unless outbox.Options.Schema names
// one. To remove an outbox, drop the five tables (DROP TABLE IF EXISTS <prefix>outbox,
// <prefix>outbox_lanes, <prefix>outbox_nodes, <prefix>inbox, <prefix>inbox_lease);
// nothing else is created. A statement over a table that does not exist (error 1146)
// returns an error wrapping outbox.ErrSchemaMissing that names this fix.
//
// The rows table has one index, its primary key (lane, id), and InnoDB stores the rows
// in that order: an insert pays for one B-tree (a secondary index cost a 1,000-row
// transaction 10-15 % of its rate on MariaDB), and both hot reads are ranges of the rows
// themselves, in id order without a sort: the head of a lane (lane = ? ORDER BY id) and
// unordered due rows (lane = -1: a primary key holds no NULL, so unordered rows store
// -1, which is outbox.Unordered). A parked row stores -3 - lane (-2 for an unordered
// one, -3 for lane 0, ...), so parked rows sit below the pending ones: the hot reads
// never pass them, and parked listings and counts read only their range (a CHECK ties
// status to the sign of the lane). Every statement that changes rows names their lane
// (the store contract passes it: Lane of RenewParams, CompleteParams, ReleaseParams,
// FailParams); Park, which gets an id alone, names every lane of Options.Lanes, one
// primary-key point each. An id is unique within its lane by the key and across lanes
// by being a ULID. There is no index on claim_token: token claims are renewed,
// completed and released within their lane. deliver_at defaults to created_at, so an
// INSERT names it only for scheduled rows; likewise lane defaults to -1 and is named only
// for ordered rows, and the other optional columns (ordering_key, transport,
// message_type, tenant_id) only when a row of the statement uses them: each column
// named costs every row its parsing on the server.
// TestExplain shows the plans on MariaDB and Oracle MySQL over 100,000 rows (a range of
// the primary key, no filesort, about 100 rows read for a 100-row read), and
// TestExplainWritesByIDs those of every write by id.
//
// A table created before 2026-12-07 is keyed by id with lane NULL for unordered rows:
// Insert and the forwarder's startup check (MaxLane) refuse it with an error wrapping
// outbox.ErrSchemaOutdated, and docs/operations.md says how to migrate it.
//
// TablePrefix is at most 52 characters ([MaxTablePrefixChars]): the longest table name,
// <prefix>outbox_lanes, then fits MySQL's 64, and so do MySQL 8's generated constraint
// names <prefix>outbox_chk_<n>. Schema is at most 64 characters. Only BMP characters are
// allowed (NUL and supplementary characters such as emoji are refused); backticks are
// escaped, so any other character is safe. Invalid options fail [New] and [CreateScript]
// with an error wrapping outbox.ErrInvalidOptions that names the field.
//
// # DSN
//
// The store works with any DSN setting of parseTime, loc, interpolateParams and
// clientFoundRows: instants are bound as UTC text formatted by the store and read back
// as text, and no result depends on "rows affected" counting unchanged rows. The session
// time_zone does not matter (DATETIME is never converted). Keep the driver's default
// utf8mb4 connection charset. maxAllowedPacket may stay at the driver's default (64 MiB)
// or be any value from 4 MiB.
//
// Statements are sent as text with their values inlined (digits, the store's own
// instant text, hex literals for bytes and strings), so each is one round trip without
// server-side prepared statements, and nothing of a value reaches the SQL text
// unencoded. Insert is the exception (below).
//
// # Connector
//
// A pool opened with [OpenDB] (or sql.OpenDB of [NewConnector]) is the driver's own with
// one addition: a transaction that the Store begins with a first statement of its own,
// the inbox record of [Store.BeginRecordInbox] (inbox.Inbox.OutboxMiddleware), sends
// START TRANSACTION and the record as one query, one round trip, instead of a START
// TRANSACTION that database/sql waits for before the record. For that the connector
// turns on the driver's MultiStatements; [NewConnector] says what that changes.
//
// # Writes
//
// Insert writes inside the caller's transaction. Every record is validated first (id,
// lane, instants, headers, column lengths, UTF-8), so a bad batch fails with
// outbox.ErrInvalidRecord before anything is written. Then:
//
//   - Full groups of 64 rows go through a prepared multi-row INSERT, one per set of
//     optional columns the group uses, which each connection of the pool prepares once
//     (database/sql re-prepares a statement per connection) and then executes with the
//     values in binary: the server parses no values, which makes 1,000 rows about a
//     third faster than as text. A statement is prepared in the background the first
//     time its column set is seen (that batch goes as text), and only when the pool's
//     connections use utf8mb4 both ways (character_set_client and
//     character_set_connection, the driver's default): under another character set the
//     server would convert the strings, so everything goes as text. A Store prepares at
//     most 4 column sets (a batch of any other set goes as text), so it holds at most 4
//     server-side statements per pooled connection it writes through: size the
//     server's max_prepared_stmt_count (16,382 by default, for the whole server) for
//     Stores × 4 × connections. When the server refuses to prepare one more (that limit
//     reached) or a statement keeps being invalidated by concurrent DDL, that group
//     and the rest of the batch go as text, and the column set goes as text for ten
//     minutes. A transaction of another *sql.DB than the Store's (publisher's BeginDB,
//     WithTxDB) always goes as text. A connection prepares its statements the first
//     time it writes a full group: keep SetMaxIdleConns at least at the number of
//     concurrent writers, so that connections are not closed and reopened (and their
//     statements prepared again) between commits. The statements are closed when the
//     Store is garbage-collected, or with the *sql.DB.
//   - The rest (fewer than 64 rows, a group too large for one packet or whose
//     statement is not prepared, and every group after it) goes in multi-row text
//     statements, chunked by bytes under the server's max_allowed_packet (read once from
//     the server: MariaDB's default is 16 MiB while the driver assumes 64 MiB) and under
//     4 MiB, counting values at their worst encoded size: a batch of more than 256 KiB
//     goes in statements of about a quarter of it (at least 256 KiB), each encoded while
//     the server inserts the previous one. Chunks over 2 MiB bind parameters, under the
//     65,535-placeholder limit of server-side prepared statements.
//
// # Everything else
//
// Every method except Insert runs on its own pooled connection, never in the caller's
// transaction: single statements in autocommit, and short READ COMMITTED transactions
// where a claim locks rows (SELECT ... FOR UPDATE SKIP LOCKED, then UPDATE), a claim
// renewal must count rows whose expiry did not change, or a lease is acquired. READ
// COMMITTED takes no gap locks, so a claimer never blocks the writers' inserts. A claim
// answers an idle poll (no eligible unordered row; a lane that is empty or whose head is
// not due or claimed) with one non-locking read. An ordered claim locks the lease row
// (LOCK IN SHARE MODE) and the head in one transaction and never takes a row behind one
// that another transaction holds. Lane renewals, completions, releases and failures
// check the lease in the same statement.
//
// Deadlocks (1213) and lock wait timeouts (1205) come back as *outbox.RetryableError
// (outbox.IsRetryable); the *mysql.MySQLError stays reachable with errors.As. An
// operation InnoDB picked as a deadlock victim (its work rolled back) first runs again
// by itself, up to [DeadlockAttempts] times. A pooled connection the server ended while
// it sat idle is recognised (outbox.StaleConnChecker), so publisher.Outbox.Begin takes
// another one.
//
// The store also implements [outbox.BatchLocker]: LockBatch runs the unordered claim's
// locking read in a READ COMMITTED transaction it keeps open, without the claim UPDATE;
// the batch's Finish deletes and fails its rows in that transaction and commits, its
// deletes pinned to primary-key ranges (id IN (...) ORDER BY id LIMIT n).
//
// Privileges: CREATE (for CreateSchema only), SELECT, INSERT, UPDATE, DELETE on the
// five tables. Tests and benchmarks of this package: docs/development.md.
package mysql
