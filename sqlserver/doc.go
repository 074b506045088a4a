// Package sqlserver is the SQL Server dialect of watermill-outbox: an [outbox.Store]
// over a *sql.DB opened with github.com/microsoft/go-mssqldb, and the idempotent T-SQL
// of its three tables ([CreateScript]). SQL Server 2019 and later are supported (the
// store needs DROP ... IF EXISTS, filtered indexes and datetimeoffset).
//
// Storage follows the outbox row model: ids and fencing tokens are binary(16) in network
// byte order (never uniqueidentifier, whose sort order mixes the bytes), instants are
// datetimeoffset(7) written in UTC, strings are nvarchar(max) and headers and body are
// varbinary(max). Parameters carry ids and tokens as raw 16-byte slices (go-mssqldb sends
// them as varbinary unchanged; mssql.UniqueIdentifier would swap bytes) and instants as
// time.Time, which go-mssqldb sends as datetimeoffset(7).
//
// Every method except Insert runs on its own pooled connection in autocommit, one
// statement each. Unordered claims take rows with UPDLOCK, READPAST and ROWLOCK, so
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
// that turns NOCOUNT on for every session cannot make changes look refused.
//
// The store also implements [outbox.BatchLocker] (the forwarder's UnorderedLocking
// mode): LockBatch reads the unordered claim's rows WITH (UPDLOCK, READPAST, ROWLOCK,
// READCOMMITTEDLOCK) in an open READ COMMITTED transaction, which holds their update
// locks until Finish deletes the sent rows, records the failures and commits (or until
// the rollback). Other batches and ordinary claims skip those rows (READPAST); a plain
// reader under READ COMMITTED without the hint waits for them. Unlike the other
// dialects this path has not run against a server here (see README).
//
// Insert writes in the caller's transaction: up to [BulkThreshold] rows as parameterised
// multi-row INSERT statements (never more than 2,000 parameters or 1,000 rows each),
// more through go-mssqldb's bulk copy with CHECK_CONSTRAINTS and FIRE_TRIGGERS, so the
// table's check constraints stay trusted and its triggers fire.
package sqlserver
