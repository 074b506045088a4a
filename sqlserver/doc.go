// Package sqlserver is the SQL Server dialect of watermill-outbox: an [outbox.Store]
// over a *sql.DB opened with github.com/microsoft/go-mssqldb, and the idempotent T-SQL
// of its five tables ([CreateScript]). SQL Server 2019 and later are supported (the
// store needs DROP ... IF EXISTS, filtered indexes and datetimeoffset). Driver name
// "sqlserver"; any go-mssqldb URL works:
//
//	db, err := sql.Open("sqlserver", "sqlserver://user:password@host:1433?database=app")
//	opts := outbox.Options{Schema: "messaging", TablePrefix: "orders_"} // "" = dbo
//	store, err := sqlserver.New(db, opts)
//	script, err := sqlserver.CreateScript(opts)
//
// New and CreateScript take outbox.Options, as the other dialects do. The database must
// exist and the login needs CREATE TABLE there (and CREATE SCHEMA when a named schema
// does not exist yet).
//
// # Never run against a live server
//
// No SQL Server could run where this package was written (no Docker engine). What it
// was verified against, and nothing more:
//
//   - golden files of the generated DDL and of every statement of the store
//     (sqlserver/testdata; go test ./sqlserver/ -update rewrites them), and a lexer
//     check that every statement's brackets, quotes and parentheses balance;
//   - fuzzing that no schema or prefix can end a bracketed name or an N'...' literal
//     early or change the structure of any statement (and that go-mssqldb's bulk copy
//     keeps the quoted table name);
//   - server-free unit tests: option validation and its messages, insert chunk planning
//     for 1, 64, 1,000 and 10,000 rows, record validation, the Go type and declared SQL
//     type of every parameter the store sends (TestParametersHaveFixedTypes, through a
//     recording database/sql driver) and of every bulk copy value, error translation
//     with constructed mssql.Error values, the stale-connection errors of a BEGIN;
//   - expert reading of every statement against the conformance rules and against
//     go-mssqldb v1.11.2's source (issue 42 lists what the last reading found; each
//     point has its fix, golden and test).
//
// The whole outboxtest conformance suite (TestConformance, including the rules issue 42
// added: Triggers, Isolation/SerializableSessions, Head/LockedHeadNotSkipped and
// Claim/NotHeldByOpenMultiRowWriter, which pass on MariaDB, Oracle MySQL and
// PostgreSQL) and the benchmarks (BenchmarkStore) are wired and run wherever
// OUTBOX_TEST_SQLSERVER_DSN is set (docs/development.md). They have not yet run
// against a server, so nothing about behaviour on a live SQL Server is claimed here.
// That includes [outbox.BatchLocker] (below). Its assumptions, to check on a first live
// run (sys.dm_tran_locks while a batch is open): the update locks stay row locks, and
// the READPAST claims and other batches skip the locked rows instead of waiting. The
// suite's LockedBatch rules (DisjointAndHiddenFromClaim among them) test exactly that
// wherever the DSN is set.
//
// # Database settings
//
// What the store assumes of the database and of the sessions that use it:
//
//   - READ_COMMITTED_SNAPSHOT: on or off, the store behaves the same. Every read that
//     decides what to send is a locking read (READCOMMITTEDLOCK), and every statement
//     with READPAST first pins READ COMMITTED (READPAST is refused under SERIALIZABLE
//     and SNAPSHOT), inside a batch sent through sp_executesql, so a pooled session
//     keeps its own level whatever a SessionInitSQL or an application set.
//     ALLOW_SNAPSHOT_ISOLATION is not needed; an application's SNAPSHOT transaction may
//     write the outbox (a snapshot update conflict, 3960, is retryable).
//   - Who waits for whom, under either setting: a lane's reads (Head, the ordered claim,
//     Read of a lane) never skip a locked row, so they wait for a writer's open
//     transaction that wrote into that lane, and for an old owner's statement on its
//     head row: a head row skipped would send the rows behind it first. The unordered
//     claim, LockBatch, Read of unordered rows, Count, Stats, the lane scout's probe
//     (PendingLanes) and InboxStats skip locked rows (READPAST) instead of waiting; a
//     lane whose rows are all locked is found by the next probe. MaxLane takes no locks
//     (READUNCOMMITTED): the forwarder's check that no row lies beyond its lane count
//     must neither wait nor skip, and a writer's uncommitted row in a lane out of range
//     is the misconfiguration it looks for.
//   - Lock settings: the outbox table has LOCK_ESCALATION = DISABLE and its indexes
//     ALLOW_PAGE_LOCKS = OFF (CreateSchema sets both, and turns page locks off on
//     tables created by earlier versions), since READPAST skips row locks only: a page
//     or table lock taken by a multi-row write (a Complete of 2,000 ids, a Purge of a
//     key, an application's multi-row INSERT or bulk copy) would make every claimer
//     wait for the writer's whole transaction. Index maintenance must REBUILD those
//     indexes: REORGANIZE needs page locks (error 2552). LOCK_TIMEOUT may be anything;
//     a lock request time-out (1222) is retryable.
//   - SET options: the outbox table's filtered indexes need ANSI_NULLS, ANSI_PADDING,
//     ANSI_WARNINGS, CONCAT_NULL_YIELDS_NULL and QUOTED_IDENTIFIER ON and
//     NUMERIC_ROUNDABORT OFF in every session that writes it (ARITHABORT follows
//     ANSI_WARNINGS at compatibility level 90 and above). go-mssqldb's sessions have
//     them (its login asks for ODBC defaults), and the script sets them for sqlcmd. A
//     trigger or stored procedure keeps the QUOTED_IDENTIFIER and ANSI_NULLS it was
//     created with, so one created with either off (sqlcmd without -I) makes every
//     write to the outbox through it fail with error 1934; the store's error then
//     names the query that lists such modules. Recreate them with both ON. NOCOUNT may
//     be on or off: the store's counts come back as data.
//   - Triggers on the outbox table are welcome (an audit, a feed): counts are selected
//     from each statement's own OUTPUT rows, never taken from the driver's sum of DONE
//     tokens, which includes the triggers' statements; claims OUTPUT INTO a table
//     variable; bulk copy fires triggers. A trigger must not return result sets.
//   - Plan cache: every parameter has a declared type that does not follow its value's
//     length (strings nvarchar(max), headers, bodies and inbox keys varchar(max) hex
//     digits converted back in the statement, ids and tokens varbinary(16)), so each
//     statement compiles once, and each INSERT once per row count.
//
// # Schema
//
// [CreateScript] returns idempotent T-SQL (IF OBJECT_ID(...) IS NULL, IF NOT EXISTS (...
// sys.indexes ...)) for five tables, <prefix>outbox, <prefix>outbox_lanes,
// <prefix>outbox_nodes and package inbox's <prefix>inbox and <prefix>inbox_lease
// (created whether or not the inbox is used), as one batch without GO (to remove an
// outbox, drop the five tables; a statement over a missing one, error 208, returns an
// error wrapping outbox.ErrSchemaMissing that names the fix); [Store.CreateSchema] runs the same statements under an
// application lock (sp_getapplock), so forwarders starting at once do not race on CREATE
// TABLE. A named schema that does not exist is created (IF SCHEMA_ID(...) IS NULL, as
// PostgreSQL's CREATE SCHEMA IF NOT EXISTS); dbo always exists. The tables carry the
// CHECK constraints of the row model, a clustered primary key on id, and filtered
// indexes for pending rows (both hot reads), parked rows and live claims. The outbox
// table has LOCK_ESCALATION = DISABLE and its indexes ALLOW_PAGE_LOCKS = OFF, so a
// writer's large commit takes neither a table lock nor page locks that would stall the
// forwarders (see Database settings); on an existing table whose indexes allow page
// locks, the script turns them off (guarded ALTER INDEX), the only change it makes to
// an existing object. The script first sets the session options filtered indexes need
// (QUOTED_IDENTIFIER ON and the others), so it also runs under sqlcmd without -I.
//
// A lane is read in the order its rows were inserted: an IDENTITY column, seq, numbers
// each row at the writer's commit, and ix_lane_seq serves the head of a lane in that
// order (see package forwarder for the guarantee). A rows table created before seq
// existed has no migration script here (an IDENTITY added to a table numbers its rows in
// no defined order): drain the outbox, stop its writers and forwarders, drop the rows
// table and run CreateSchema or `outboxctl schema apply`.
//
// Schema, table, index and constraint names are quoted with brackets by one helper ("]"
// doubled) and each must fit SQL Server's 128 UTF-16 code units: the prefix may be at
// most 106 units ([MaxTablePrefixUnits]; a supplementary character counts two). NUL,
// invalid UTF-8 and longer names are rejected by [New] and [CreateScript] with an error
// naming the field (wrapping outbox.ErrInvalidOptions). Literals in the script
// (OBJECT_ID(N'...')) are escaped by one helper too; both are fuzzed.
//
// Storage follows the outbox row model: ids and fencing tokens are binary(16) in network
// byte order (never uniqueidentifier, whose sort order mixes the bytes), instants are
// datetimeoffset(7) written in UTC, strings are nvarchar(max) and headers and body are
// varbinary(max). Parameters carry ids and tokens as raw 16-byte slices (go-mssqldb sends
// them as varbinary unchanged; mssql.UniqueIdentifier would swap bytes) and instants as
// time.Time, which go-mssqldb sends as datetimeoffset(7).
//
// Every method except Insert runs on its own pooled connection in autocommit, one
// statement each. Claims are one UPDATE through a TOP (n) ... ORDER BY id CTE whose
// OUTPUT goes into a table variable (so triggers on the table are allowed); renew,
// complete, release and fail are fenced by the claim token, a live claim and, in a
// lane, the live lane lease. Unordered claims take rows with UPDLOCK, READPAST and
// ROWLOCK, so claimers skip each other's rows; an ordered claim reads the head of its
// lane without READPAST, so a head row another session has locked holds the lane
// instead of being skipped (and waits for a writer's open transaction in that lane); it
// first takes its lane's lease row with UPDLOCK, HOLDLOCK in a short transaction, so
// claims of one lane run one after another and two never take the same head. Head
// reads the same way, for the same reason. Every READPAST comes with READCOMMITTEDLOCK
// (see Database settings). Deadlock victims (1205) are retried twice, then reported,
// like the other transient errors (1204, 1222, 3960, and Azure SQL's reconfiguration
// and throttling errors 4221, 10928, 10929, 40197, 40501, 40613, 49918, 49919, 49920),
// as *outbox.RetryableError. Snapshot update conflicts are possible only in a caller's
// SNAPSHOT transaction, during Insert or when RecordInbox counts a duplicate of an entry
// another transaction committed after the snapshot began. A pooled connection the server
// closed is recognised (outbox.StaleConnChecker, asked about a BEGIN's error only):
// driver.ErrBadConn, and the *net.OpError or io.EOF that go-mssqldb returns when the
// server closed an idle connection cleanly (a gateway's idle timeout, a failover), so
// publisher.Outbox.Begin takes another.
//
// The store also implements [outbox.BatchLocker] (the forwarder's default for unordered
// rows): LockBatch reads the unordered claim's rows WITH (UPDLOCK, READPAST, ROWLOCK,
// READCOMMITTEDLOCK) in an open READ COMMITTED transaction, which holds their update
// locks until Finish deletes the sent rows, records the failures and commits (or until
// the rollback). Other batches and ordinary claims skip those rows (READPAST); a plain
// reader under READ COMMITTED without the hint waits for them. Unlike the other
// dialects this path has not run against a server here (see above).
//
// Insert writes in the caller's transaction: up to [BulkThreshold] rows (and
// [BulkBytes]) as parameterised multi-row INSERT statements (never more than 2,000
// parameters or 1,000 rows each; headers and bodies travel as hex digits there, twice
// their size, for one plan per row count), more through go-mssqldb's bulk copy (mssql.CopyIn)
// with CHECK_CONSTRAINTS and FIRE_TRIGGERS and without TABLOCK, so the table's check
// constraints stay trusted and its triggers fire. Every record is validated first (zero
// id, lane out of range, headers that do not decode, strings that are not UTF-8, which
// nvarchar would alter): an invalid one fails the call with outbox.ErrInvalidRecord
// before anything is written.
package sqlserver
