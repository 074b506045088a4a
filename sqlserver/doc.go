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
// No SQL Server could run where this package was written (no Docker engine), so only
// the server-free tests have run: option validation and its messages, the generated DDL
// and every statement of the store against golden files (sqlserver/testdata; go test
// ./sqlserver/ -update rewrites them), a lexer check that every statement's brackets,
// quotes and parentheses balance, fuzzing that no schema or prefix can end a bracketed
// name or an N'...' literal early or change the structure of any statement (and that
// go-mssqldb's bulk copy keeps the quoted table name), insert chunk planning for 1, 64,
// 1,000 and 10,000 rows, record validation, the Go type of every value Insert sends
// (the ones go-mssqldb v1.11.2 maps to each column's type, as parameters and in bulk
// copy), and error translation with constructed mssql.Error values. The T-SQL and the
// driver usage were reviewed statement by statement against the suite and go-mssqldb's
// source, which is no substitute for a run. The whole outboxtest conformance suite
// (TestConformance) and the benchmarks (BenchmarkStore) are wired and run wherever
// OUTBOX_TEST_SQLSERVER_DSN is set (docs/development.md); they have not yet run against
// a server, so nothing about behaviour on a live SQL Server is claimed here. That
// includes [outbox.BatchLocker] (below). Its assumptions, to check on a first live run
// (sys.dm_tran_locks while a batch is open): the update locks stay row locks (no
// escalation at the batch sizes used: 500 rows by default, well under the 5,000-lock
// threshold), and the READPAST claims and other batches skip the locked rows instead of
// waiting. The suite's LockedBatch rules (DisjointAndHiddenFromClaim among them) test
// exactly that wherever the DSN is set.
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
// table has LOCK_ESCALATION = DISABLE, so a writer's large commit never takes a table
// lock that would stall the forwarders. The script first sets the session options
// filtered indexes need (QUOTED_IDENTIFIER ON and the others), so it also runs under
// sqlcmd without -I.
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
// lane, the live lane lease. Unordered claims take rows with UPDLOCK, READPAST and ROWLOCK, so
// claimers skip each other's rows; an ordered claim reads the head of its lane without
// READPAST, so a head row another session has locked holds the lane instead of being
// skipped (and waits for a writer's open transaction in that lane); it first takes its
// lane's lease row with UPDLOCK, HOLDLOCK in a short transaction, so claims of one lane
// run one after another and two never take the same head. Reads, counts and
// stats skip locked rows too: a writer's uncommitted rows are not eligible yet, and rows
// being claimed are about to stop being. MaxLane does not skip (a skipped row could hide
// a lane beyond the forwarder's count). Every READPAST comes with READCOMMITTEDLOCK,
// so the store locks alike whether or not the database has READ_COMMITTED_SNAPSHOT on.
// Deadlock victims (1205) are retried twice, then reported like lock request timeouts
// (1222) and snapshot update conflicts (3960) as *outbox.RetryableError. Statements
// whose affected-row count the store reports start with SET NOCOUNT OFF, so a server
// that turns NOCOUNT on for every session (its user options) cannot make changes look
// refused. Snapshot update conflicts are possible only in a caller's SNAPSHOT
// transaction, during Insert or when RecordInbox counts a duplicate of an entry
// another transaction committed after the snapshot began. A pooled connection the server closed is recognised
// (outbox.StaleConnChecker: driver.ErrBadConn), so publisher.Outbox.Begin takes another.
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
// parameters or 1,000 rows each), more through go-mssqldb's bulk copy (mssql.CopyIn)
// with CHECK_CONSTRAINTS and FIRE_TRIGGERS and without TABLOCK, so the table's check
// constraints stay trusted and its triggers fire. Every record is validated first (zero
// id, lane out of range, headers that do not decode, strings that are not UTF-8, which
// nvarchar would alter): an invalid one fails the call with outbox.ErrInvalidRecord
// before anything is written.
package sqlserver
