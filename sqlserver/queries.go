package sqlserver

import (
	"strconv"
	"strings"

	outbox "github.com/relayer-go/watermill-outbox"
)

// All of the dialect's DML lives here, built once per store from the quoted names.
// Parameters are named (@now, @tok, ...): go-mssqldb sends []byte as varbinary and
// time.Time as datetimeoffset(7); ids and tokens are CAST to binary(16) so comparisons
// with the key columns are plain seeks, never conversions of the column. The literal
// 'pending' and 'parked' (never parameters) let the optimizer match the filtered indexes.

// selectCols is the column order every row scan expects (see rowScanner.scan).
const selectCols = "id, message_uuid, lane, ordering_key, transport, destination, message_type, headers, body, " +
	"tenant_id, created_at, deliver_at, attempts, last_error, status, claim_token, claim_expires_at, seq"

// insertCols are the columns Insert writes; the others start at their defaults
// (attempts 0, status pending, no error, no claim).
var insertCols = []string{
	"id", "message_uuid", "lane", "ordering_key", "transport", "destination", "message_type",
	"headers", "body", "tenant_id", "created_at", "deliver_at",
}

// claimedTable declares the table variable a claim's OUTPUT goes INTO: OUTPUT without
// INTO fails (error 334) on a table with enabled triggers, and bulk copy's FIRE_TRIGGERS
// promises that triggers are welcome.
const claimedTable = "DECLARE @claimed TABLE (id binary(16) NOT NULL PRIMARY KEY, message_uuid nvarchar(max), " +
	"lane int, ordering_key nvarchar(max), transport nvarchar(max), destination nvarchar(max), " +
	"message_type nvarchar(max), headers varbinary(max), body varbinary(max), tenant_id nvarchar(max), " +
	"created_at datetimeoffset(7), deliver_at datetimeoffset(7), attempts int, last_error nvarchar(max), " +
	"status varchar(16), claim_token binary(16), claim_expires_at datetimeoffset(7), seq bigint);"

// eligible is the eligibility rule for alias a at @now.
func eligible(a string) string {
	return a + ".status = 'pending' AND " + a + ".deliver_at <= @now AND (" +
		a + ".claim_expires_at IS NULL OR " + a + ".claim_expires_at <= @now)"
}

// skipLocked is the hint of reads that skip rows other sessions have locked.
// READCOMMITTEDLOCK makes every read of the store a locking read, as READPAST requires
// when the database has READ_COMMITTED_SNAPSHOT on, so the store behaves the same
// whichever way the database is set.
const skipLocked = "WITH (READPAST, READCOMMITTEDLOCK)"

// readCommitted pins a batch's isolation level. READPAST is refused (error 650) under
// SERIALIZABLE and SNAPSHOT, and a pooled session may carry either: a SessionInitSQL,
// an application's transaction that set it, or a server default. SET TRANSACTION
// ISOLATION LEVEL inside a batch that go-mssqldb sends through sp_executesql (any batch
// with arguments) ends with the batch, so the session keeps its own level.
const readCommitted = "SET TRANSACTION ISOLATION LEVEL READ COMMITTED;\n"

// counted turns one INSERT, UPDATE, DELETE or MERGE whose row count the store reports
// into a batch that returns the count as data: its OUTPUT clause writes one row per
// changed row into @changed, and the batch ends with SELECT COUNT_BIG(*) of it. The
// count cannot come from the server's DONE tokens: go-mssqldb adds up those of every
// statement of the request, including the statements of triggers on the table (an
// audit trigger would double a Complete's count, and the forwarder would read a lane's
// fenced delete as a lost lease), and a trigger doing DML of its own even when the
// statement changed nothing would make a refused Fail look done. NOCOUNT is on, so no
// statement sends a count at all, whatever the server's 'user options' say. OUTPUT
// goes INTO a table variable because a bare OUTPUT is refused (error 334) on a table
// with enabled triggers.
//
// The OUTPUT clause goes before the statement's first " WHERE " (UPDATE and DELETE;
// none of their SET clauses holds one), or at the end (a MERGE, before its ";", and a
// DELETE through a CTE, whose WHERE is the CTE's).
func counted(stmt string) string {
	const output = " OUTPUT 1 INTO @changed"
	switch i := strings.Index(stmt, " WHERE "); {
	case strings.HasPrefix(stmt, "MERGE "), strings.HasPrefix(stmt, "WITH "):
		stmt = strings.TrimSuffix(stmt, ";") + output + ";"
	case i >= 0:
		stmt = stmt[:i] + output + stmt[i:] + ";"
	default:
		stmt += output + ";"
	}
	return "SET NOCOUNT ON;\nDECLARE @changed TABLE (n int NOT NULL);\n" + stmt + "\nSELECT COUNT_BIG(*) FROM @changed;"
}

func binParam(name string) string { return "CAST(@" + name + " AS binary(16))" }

// sameKey compares ordering keys exactly: '=' on nvarchar follows the column's collation
// (usually case-insensitive) and ignores trailing spaces, while keys are Go strings. The
// bytes are compared as varbinary, which in turn ignores trailing zero bytes (0x61 =
// 0x610000), so a key ending in U+0000 would match the key without it; the lengths are
// compared too.
func sameKey(a, b string) string {
	return "CAST(" + a + " AS varbinary(max)) = CAST(" + b + " AS varbinary(max)) AND DATALENGTH(" + a + ") = DATALENGTH(" + b + ")"
}

type queries struct {
	outbox, lanes, nodes string // quoted, schema-qualified

	readUnordered, readLane                  string
	claimUnordered, claimLane, claimLaneHold string
	lockUnordered, lockedFail                string
	fail, failFenced                         string
	park, count, stats, maxLane              string
	seqMissing                               string // 1 when the rows table exists without seq
	nextPendingLane                          string
	parkedAny, parkedKey, parkedNullKey      string
	requeueAll, requeueKey, requeueNullKey   string
	purgeAll, purgeKey, purgeNullKey         string
	acquireLease, renewLease, releaseLease   string
	laneRun, parkedKeys, failLane            string
	leases, heartbeat, members, leave        string

	inbox                                                        string // quoted, qualified
	inboxRecord, inboxDuplicate, inboxPrune                      string
	inboxNextConsumer, inboxConsumer, inboxOldest, inboxEstimate string
	inboxAcquire, inboxRelease                                   string
}

func newQueries(n names) *queries {
	s := quoteIdent(n.schema) + "."
	q := &queries{outbox: s + quoteIdent(n.outbox), lanes: s + quoteIdent(n.lanes), nodes: s + quoteIdent(n.nodes)}
	t := q.outbox

	// READPAST: an unordered read or a count does not wait for writers' open
	// transactions (their rows are not committed, so not eligible) nor for rows being
	// claimed. A lane's read never skips (see laneRun): it waits for its locked rows.
	read := func(hints, lane string) string {
		return readCommitted + "SELECT TOP (@n) " + selectCols + " FROM " + t + " AS o " + hints + " WHERE " + lane +
			" AND o.id > " + binParam("after") + " AND " + eligible("o") + " ORDER BY o.id"
	}
	q.readUnordered = read(skipLocked, "o.lane IS NULL")
	q.readLane = read("WITH (READCOMMITTEDLOCK)", "o.lane = @lane")

	q.claimUnordered = q.claim("WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)", "o.lane IS NULL AND o.id > "+binParam("after")+" AND "+eligible("o"))
	// LockBatch's read: the same rows as an unordered claim, whose update locks the
	// batch's transaction holds instead of writing a claim.
	q.lockUnordered = "SELECT TOP (@n) " + selectCols + " FROM " + t + " AS o WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK) " +
		"WHERE o.lane IS NULL AND o.id > " + binParam("after") + " AND " + eligible("o") + " ORDER BY o.id"
	// Head: the pending rows of one lane in seq order (the order they were inserted, see
	// schema.go). No READPAST, on purpose: a lane's head row that another session has
	// locked must hold the lane, never be skipped. Skipping it would send the rows behind
	// it first: the old owner's fenced delete or Fail of that row during a takeover (it
	// may roll back and the row stay), an operator's Park or Requeue, or a writer's row
	// not committed yet that will sort before the rows after it. So the read waits for
	// the lock, as the ordered claim does (laneHead); READCOMMITTEDLOCK makes it a
	// locking read under READ_COMMITTED_SNAPSHOT too, so it never returns a version the
	// lock holder is about to replace.
	q.laneRun = readCommitted + "SELECT TOP (@n) " + selectCols + " FROM " + t + " AS o WITH (READCOMMITTEDLOCK)" +
		" WHERE o.status = 'pending' AND o.lane = @lane AND o.seq > @after ORDER BY o.seq"
	// Every parked row of a keyed lane (few by design); Head keeps the smallest seq per
	// key in Go, comparing keys exactly whatever the column's collation. No READPAST
	// either: a parked row skipped while it is locked would let its key's later rows go.
	// It seeks the parked index, which writers' inserts (pending rows) never lock; only
	// Park, Requeue and Purge do, briefly.
	q.parkedKeys = readCommitted + "SELECT ordering_key, seq FROM " + t + " WITH (READCOMMITTEDLOCK) WHERE status = 'parked' AND lane = @lane AND ordering_key IS NOT NULL"
	q.claimLane = q.claimLaneBatch(false)
	q.claimLaneHold = q.claimLaneBatch(true)

	failSQL := "UPDATE " + t + " SET attempts = attempts + 1, last_error = @err, claim_token = NULL, claim_expires_at = NULL, " +
		"deliver_at = CASE WHEN @retry > @now THEN @retry ELSE deliver_at END, " +
		"status = CASE WHEN @park = 1 THEN 'parked' ELSE status END " +
		"WHERE id = " + binParam("id") + " AND claim_token = " + binParam("tok") + " AND claim_expires_at > @now AND status = 'pending'"
	q.fail = counted(failSQL)
	// A locked batch's failure: the batch holds the row's lock, so no claim to check.
	q.lockedFail = "UPDATE " + t + " WITH (ROWLOCK) SET attempts = attempts + 1, last_error = @err, " +
		"deliver_at = CASE WHEN @retry > @now THEN @retry ELSE deliver_at END, " +
		"status = CASE WHEN @park = 1 THEN 'parked' ELSE status END WHERE id = " + binParam("id")
	q.failFenced = counted(failSQL + " AND lane = @lane AND " + q.liveLease())
	// A head row's failure (read with Head): fenced by the lease alone.
	q.failLane = counted("UPDATE " + t + " SET attempts = attempts + 1, last_error = @err, claim_token = NULL, claim_expires_at = NULL, " +
		"deliver_at = CASE WHEN @retry > @now THEN @retry ELSE deliver_at END, " +
		"status = CASE WHEN @park = 1 THEN 'parked' ELSE status END " +
		"WHERE id = " + binParam("id") + " AND status = 'pending' AND lane = @lane AND " + q.liveLease())

	q.park = counted("UPDATE " + t + " SET status = 'parked', last_error = @reason, claim_token = NULL, claim_expires_at = NULL " +
		"WHERE id = " + binParam("id") + " AND status = 'pending' AND (claim_expires_at IS NULL OR claim_expires_at <= @now)")

	q.count = readCommitted + "SELECT COUNT_BIG(*) FROM " + t + " AS o " + skipLocked + " WHERE " + eligible("o")
	// One statement, so the lanes and the parked count come from one read.
	q.stats = readCommitted + "SELECT 0, o.lane, COUNT_BIG(*), MIN(o.deliver_at) FROM " + t + " AS o " + skipLocked + " WHERE " + eligible("o") +
		" GROUP BY o.lane UNION ALL SELECT 1, NULL, COUNT_BIG(*), NULL FROM " + t + " AS p " + skipLocked + " WHERE p.status = 'parked'"
	// The lane scout's probe: MIN(lane) of the pending rows above @after, one seek of
	// the lane index. READPAST: it never waits behind a writer's open transaction (under
	// locking READ COMMITTED, the on-premises default, it would, and stall the scout for
	// as long as the writer's business transaction lasts). A lane whose rows are all
	// locked at that instant is found by the next probe; the lane's worker, when it
	// holds the lane, reads it on its own anyway.
	q.nextPendingLane = readCommitted + "SELECT MIN(lane) FROM " + t + " " + skipLocked + " WHERE status = 'pending' AND lane > @after"
	// Each half is the last entry of a filtered index. READUNCOMMITTED (no locks taken,
	// none waited for): this is the forwarder's check that no row lies beyond its lane
	// count, and the safe error is to see too much. Skipping a locked last entry
	// (READPAST: a row of the highest lane being claimed, completed or failed) would
	// report a lower lane and let a misconfigured forwarder start; waiting (a plain read
	// under locking READ COMMITTED) would stall the start behind a writer's open
	// transaction. A writer's uncommitted row counts: written with more lanes than the
	// forwarder has, it is the misconfiguration looked for.
	q.maxLane = "SELECT MAX(m.lane) FROM (SELECT MAX(lane) AS lane FROM " + t + " WITH (READUNCOMMITTED) WHERE status = 'pending' " +
		"UNION ALL SELECT MAX(lane) FROM " + t + " WITH (READUNCOMMITTED) WHERE status = 'parked') AS m"
	// A rows table of the schema before seq (lanes in commit order) is refused by the
	// forwarder's startup check (MaxLane) with outbox.ErrSchemaOutdated.
	q.seqMissing = "SELECT CASE WHEN OBJECT_ID(" + quoteString(t) + ", N'U') IS NOT NULL AND COL_LENGTH(" + quoteString(t) + ", N'seq') IS NULL THEN 1 ELSE 0 END"

	// The listing reads the payload's first @maxbody bytes and its length.
	parked := "SELECT TOP (@n) " + strings.Replace(selectCols, "headers, body,", "headers, SUBSTRING(body, 1, @maxbody),", 1) +
		", DATALENGTH(body) FROM " + t + " AS o WHERE o.status = 'parked' AND o.id > " + binParam("after")
	q.parkedAny = parked + " ORDER BY o.id"
	q.parkedKey = parked + " AND " + sameKey("o.ordering_key", "@key") + " ORDER BY o.id"
	q.parkedNullKey = parked + " AND o.ordering_key IS NULL ORDER BY o.id"

	requeue := "UPDATE " + t + " SET status = 'pending', deliver_at = " + dbNow + ", attempts = 0, claim_token = NULL, claim_expires_at = NULL " +
		"WHERE status = 'parked'"
	q.requeueAll = counted(requeue)
	q.requeueKey = counted(requeue + " AND " + sameKey("ordering_key", "@key"))
	q.requeueNullKey = counted(requeue + " AND ordering_key IS NULL")
	purge := "DELETE FROM " + t + " WHERE status = 'parked'"
	q.purgeAll = counted(purge)
	q.purgeKey = counted(purge + " AND " + sameKey("ordering_key", "@key"))
	q.purgeNullKey = counted(purge + " AND ordering_key IS NULL")

	// HOLDLOCK makes the MERGE an atomic upsert: two acquirers of a free lane cannot
	// both insert (one waits, then sees the other's live lease).
	// Lease and heartbeat expiries are set and compared on the server's clock (dbNow,
	// dbUntil: @ttl milliseconds from it), never on a caller's.
	q.acquireLease = counted("MERGE " + q.lanes + " WITH (HOLDLOCK) AS l USING (SELECT @lane AS lane) AS s ON l.lane = s.lane " +
		"WHEN MATCHED AND (l.expires_at <= " + dbNow + " OR l.token = " + binParam("tok") + ") THEN UPDATE SET owner = @owner, token = " + binParam("tok") + ", " +
		"expires_at = CASE WHEN l.token = " + binParam("tok") + " AND l.expires_at > " + dbUntil + " THEN l.expires_at ELSE " + dbUntil + " END " +
		"WHEN NOT MATCHED THEN INSERT (lane, owner, token, expires_at) VALUES (s.lane, @owner, " + binParam("tok") + ", " + dbUntil + ");")
	q.renewLease = counted("UPDATE " + q.lanes + " SET expires_at = CASE WHEN expires_at < " + dbUntil + " THEN " + dbUntil + " ELSE expires_at END " +
		"WHERE lane = @lane AND token = " + binParam("tok") + " AND expires_at > " + dbNow)
	q.releaseLease = counted("DELETE FROM " + q.lanes + " WHERE lane = @lane AND token = " + binParam("tok"))
	q.leases = "SELECT lane, owner, token, expires_at, CAST(CASE WHEN expires_at > " + dbNow + " THEN 1 ELSE 0 END AS bit) FROM " + q.lanes + " ORDER BY lane"

	// @owner is nvarchar(max) (see text); the key column is nvarchar(400), which every
	// owner fits (checkOwner), so the comparison is a plain seek.
	q.heartbeat = "MERGE " + q.nodes + " WITH (HOLDLOCK) AS n USING (SELECT CAST(@owner AS nvarchar(400)) AS owner) AS s ON n.owner = s.owner " +
		"WHEN MATCHED THEN UPDATE SET expires_at = " + dbUntil + " " +
		"WHEN NOT MATCHED THEN INSERT (owner, expires_at) VALUES (s.owner, " + dbUntil + ");"
	q.members = "SELECT owner FROM " + q.nodes + " WHERE expires_at > " + dbNow
	q.leave = "DELETE FROM " + q.nodes + " WHERE owner = CAST(@owner AS nvarchar(400))"

	inbox := s + quoteIdent(n.inbox)
	q.inbox = inbox
	lease := s + quoteIdent(n.inboxLease)
	// A plain INSERT: a concurrent uncommitted insert of the same key makes it wait on
	// that key's lock; then it fails with 2627 (committed: a duplicate) or succeeds
	// (rolled back). XACT_ABORT OFF (reverted when the parameterised batch ends) keeps
	// the duplicate error statement-level, so the caller's transaction stays usable
	// whatever its session sets.
	q.inboxRecord = "SET XACT_ABORT OFF;\nINSERT INTO " + inbox + " (consumer, message_uuid, processed_at) VALUES (" +
		inboxKey("consumer") + ", " + inboxKey("uuid") + ", @at)"
	// After a duplicate (2627/2601) the committed entry counts it. The key was just
	// found committed; retention may have deleted it since, and then nothing is counted.
	q.inboxDuplicate = "UPDATE " + inbox + " SET duplicates = duplicates + 1 WHERE consumer = " + inboxKey("consumer") +
		" AND message_uuid = " + inboxKey("uuid")
	// Oldest first (DELETE TOP alone takes any rows): the batch is a CTE ordered by the
	// age index; READPAST passes over entries an open transaction holds.
	q.inboxPrune = readCommitted + counted("WITH batch AS (SELECT TOP (@limit) processed_at FROM "+inbox+
		" "+skipLocked+" WHERE processed_at < @before ORDER BY processed_at) DELETE FROM batch")
	// InboxStats' bounded reads (internal/inboxstats): the next consumer is one seek
	// into the primary key (naming duplicates, so that an outdated table says so even
	// when empty); a consumer's figures read at most @n entries of its key range; the
	// oldest entry is one seek into the age index; the estimate is sys.partitions'.
	// READPAST: the handlers' open transactions hold their new entries' locks for as
	// long as the handlers run; their entries are not applied yet, and the stats are not
	// held up by them (each statement has an argument: readCommitted ends with it).
	q.inboxNextConsumer = readCommitted + "SELECT TOP (1) consumer, duplicates FROM " + inbox + " " + skipLocked + " WHERE consumer > @after ORDER BY consumer"
	q.inboxConsumer = readCommitted + "SELECT COUNT_BIG(*), MIN(processed_at), COALESCE(SUM(duplicates), 0) " +
		"FROM (SELECT TOP (@n) processed_at, duplicates FROM " + inbox + " " + skipLocked + " WHERE consumer = @consumer ORDER BY message_uuid) AS t"
	q.inboxOldest = "SELECT MIN(processed_at) FROM " + inbox
	q.inboxEstimate = "SELECT COALESCE(SUM(rows), 0) FROM sys.partitions WHERE object_id = OBJECT_ID(@table) AND index_id IN (0, 1)"
	q.inboxAcquire = counted("MERGE " + lease + " WITH (HOLDLOCK) AS l USING (SELECT 'retention' AS name) AS s ON l.name = s.name " +
		"WHEN MATCHED AND (l.expires_at <= @now OR l.token = " + binParam("tok") + ") THEN UPDATE SET owner = @owner, token = " + binParam("tok") + ", " +
		"expires_at = CASE WHEN l.expires_at > @until THEN l.expires_at ELSE @until END " +
		"WHEN NOT MATCHED THEN INSERT (name, owner, token, expires_at) VALUES (s.name, @owner, " + binParam("tok") + ", @until);")
	q.inboxRelease = counted("DELETE FROM " + lease + " WHERE name = 'retention' AND token = " + binParam("tok"))
	return q
}

// inboxKey is the inbox key parameter name (hex digits, see payload) as the key
// columns' type.
func inboxKey(name string) string {
	return hexParam("@"+name, strconv.Itoa(outbox.InboxKeyMaxBytes))
}

// dbNow is the server's clock, on which lease and heartbeat expiries are set and
// compared; dbUntil is @ttl milliseconds after it.
const (
	dbNow   = "SYSUTCDATETIME()"
	dbUntil = "DATEADD(millisecond, @ttl, SYSUTCDATETIME())"
)

// liveLease is true when @lease is the live lease of @lane on the server's clock.
func (q *queries) liveLease() string {
	return "EXISTS (SELECT 1 FROM " + q.lanes + " AS l WHERE l.lane = @lane AND l.token = " + binParam("lease") + " AND l.expires_at > " + dbNow + ")"
}

// claim builds an unordered claim batch: one UPDATE through a TOP (@n) ... ORDER BY id
// CTE takes the rows, its OUTPUT goes to @claimed, and the SELECT returns them in id
// order. The isolation level is set because READPAST is refused under SERIALIZABLE,
// which a pooled connection might carry over from an application's transaction.
func (q *queries) claim(hints, where string) string {
	return "SET TRANSACTION ISOLATION LEVEL READ COMMITTED;\n" + claimedTable + "\n" +
		q.claimUpdate(hints, where) + "\n" +
		"SELECT " + selectCols + " FROM @claimed ORDER BY id;"
}

func (q *queries) claimUpdate(hints, where string) string {
	return q.claimUpdateOrdered(hints, where, "o.id")
}

// claimUpdateOrdered is claimUpdate taking the first @n rows in the order of orderBy.
func (q *queries) claimUpdateOrdered(hints, where, orderBy string) string {
	return "WITH c AS (SELECT TOP (@n) * FROM " + q.outbox + " AS o " + hints + " WHERE " + where + " ORDER BY " + orderBy + ")\n" +
		"UPDATE c SET claim_token = " + binParam("tok") + ", claim_expires_at = @until OUTPUT " +
		prefixed("inserted.", selectCols) + " INTO @claimed;"
}

// claimLaneBatch builds an ordered claim batch. The UPDATE that takes the head run is
// one statement, but a statement reads the head before it locks the rows it claims, so
// two claims of one lane running at once could each see a head the other is taking
// and claim past it. The batch therefore first takes the lane's lease row with UPDLOCK,
// HOLDLOCK in a short transaction: claims of one lane run one after another, and a claim
// under a lease that is not live takes nothing. XACT_ABORT rolls the transaction back on
// any error or cancellation.
func (q *queries) claimLaneBatch(hold bool) string {
	return "SET TRANSACTION ISOLATION LEVEL READ COMMITTED;\nSET XACT_ABORT ON;\n" + claimedTable + "\n" +
		"DECLARE @live bit = 0;\n" +
		"BEGIN TRANSACTION;\n" +
		"SELECT @live = 1 FROM " + q.lanes + " AS l WITH (UPDLOCK, HOLDLOCK) WHERE l.lane = @lane AND l.token = " +
		binParam("lease") + " AND l.expires_at > " + dbNow + ";\n" +
		q.claimUpdateOrdered("WITH (UPDLOCK, ROWLOCK, READCOMMITTEDLOCK)", "@live = 1 AND "+q.laneHead(hold), "o.seq") + "\n" +
		"COMMIT TRANSACTION;\n" +
		"SELECT " + selectCols + " FROM @claimed ORDER BY seq;"
}

func prefixed(p, cols string) string {
	parts := strings.Split(cols, ", ")
	for i := range parts {
		parts[i] = p + parts[i]
	}
	return strings.Join(parts, ", ")
}

// laneHead is the WHERE clause of an ordered claim (the lease is checked before): the
// eligible rows of @lane that come before every row holding the lane. Only the first @n
// pending rows of the lane are examined, since no more can be claimed. With hold, a row
// whose ordering key has an earlier parked row in the lane is left out of both (it
// neither is claimed nor holds the lane). No READPAST: a head row another session has
// locked must hold the lane, not be skipped.
func (q *queries) laneHead(hold bool) string {
	held := func(a string) string {
		if !hold {
			return ""
		}
		return " AND NOT EXISTS (SELECT 1 FROM " + q.outbox + " AS p WHERE p.lane = @lane AND p.status = 'parked' AND p.seq < " +
			a + ".seq AND " + sameKey("p.ordering_key", a+".ordering_key") + ")"
	}
	return "o.lane = @lane AND " + eligible("o") + held("o") +
		" AND o.seq < ALL (SELECT h.seq FROM (SELECT TOP (@n) b.seq, b.deliver_at, b.claim_expires_at FROM " + q.outbox +
		" AS b WITH (READCOMMITTEDLOCK) WHERE b.lane = @lane AND b.status = 'pending'" + held("b") + " ORDER BY b.seq) AS h" +
		" WHERE h.deliver_at > @now OR h.claim_expires_at > @now)"
}

// idList returns "CAST(@i1 AS binary(16)), ..." for n ids.
func idList(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		if i > 1 {
			b.WriteString(", ")
		}
		b.WriteString("CAST(@i")
		b.WriteString(strconv.Itoa(i))
		b.WriteString(" AS binary(16))")
	}
	return b.String()
}

// renew extends the live claims of @tok (among n ids when n > 0); fenced adds the lane
// lease. The CASE never shortens; SQL Server counts every matched row as affected, also
// those whose expiry stays, which is what Renew reports.
func (q *queries) renew(n int, fenced bool) string {
	s := "UPDATE " + q.outbox + " SET claim_expires_at = CASE WHEN claim_expires_at < @until THEN @until ELSE claim_expires_at END " +
		"WHERE claim_token IS NOT NULL AND claim_token = " + binParam("tok") + " AND claim_expires_at > @now"
	if n > 0 {
		s += " AND id IN (" + idList(n) + ")"
	}
	if fenced {
		s += " AND lane = @lane AND " + q.liveLease()
	}
	return counted(s)
}

// release gives back the live claims of @tok (among n ids when n > 0) without counting
// an attempt; fenced adds the lane lease.
func (q *queries) release(n int, fenced bool) string {
	s := "UPDATE " + q.outbox + " SET claim_token = NULL, claim_expires_at = NULL " +
		"WHERE claim_token IS NOT NULL AND claim_token = " + binParam("tok") + " AND claim_expires_at > @now"
	if n > 0 {
		s += " AND id IN (" + idList(n) + ")"
	}
	if fenced {
		s += " AND lane = @lane AND " + q.liveLease()
	}
	return counted(s)
}

// completeLane deletes the pending rows of @lane among n ids, fenced by the lease alone
// (a lane run read with Head).
func (q *queries) completeLane(n int) string {
	return counted("DELETE FROM " + q.outbox + " WHERE id IN (" + idList(n) + ") AND status = 'pending' AND lane = @lane AND " + q.liveLease())
}

// complete deletes the rows among n ids whose live claim is @tok.
func (q *queries) complete(n int, fenced bool) string {
	s := "DELETE FROM " + q.outbox + " WHERE id IN (" + idList(n) + ") AND claim_token = " + binParam("tok") +
		" AND claim_expires_at > @now"
	if fenced {
		s += " AND lane = @lane AND " + q.liveLease()
	}
	return counted(s)
}

// lockedDelete deletes n rows of a locked batch (the batch holds their locks).
func (q *queries) lockedDelete(n int) string {
	return "DELETE FROM " + q.outbox + " WITH (ROWLOCK) WHERE id IN (" + idList(n) + ")"
}

// lockedClaim hands n rows of a locked batch over to an ordinary claim of @tok.
func (q *queries) lockedClaim(n int) string {
	return "UPDATE " + q.outbox + " WITH (ROWLOCK) SET claim_token = " + binParam("tok") + ", claim_expires_at = @until " +
		"WHERE id IN (" + idList(n) + ")"
}

func (q *queries) requeueIDs(n int) string {
	return counted("UPDATE " + q.outbox + " SET status = 'pending', deliver_at = " + dbNow + ", attempts = 0, claim_token = NULL, claim_expires_at = NULL " +
		"WHERE status = 'parked' AND id IN (" + idList(n) + ")")
}

func (q *queries) purgeIDs(n int) string {
	return counted("DELETE FROM " + q.outbox + " WHERE status = 'parked' AND id IN (" + idList(n) + ")")
}

// insert returns a multi-row INSERT of rows rows with positional parameters @p1...,
// taking insertParams' values: the optional strings are stored as NULL when empty
// (DATALENGTH, since '=' ignores trailing spaces) and headers and body are converted
// from their hex digits. So every row's parameters have the same declared types.
func (q *queries) insert(rows int) string {
	var b strings.Builder
	b.Grow(64 + rows*len(insertCols)*40)
	b.WriteString("INSERT INTO ")
	b.WriteString(q.outbox)
	b.WriteString(" (")
	b.WriteString(strings.Join(insertCols, ", "))
	b.WriteString(") VALUES ")
	p := 1
	for r := 0; r < rows; r++ {
		if r > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('(')
		for c, col := range insertCols {
			if c > 0 {
				b.WriteString(", ")
			}
			param := "@p" + strconv.Itoa(p)
			switch col {
			case "ordering_key", "message_type", "tenant_id":
				b.WriteString(optionalText(param))
			case "headers", "body":
				b.WriteString(hexParam(param, "max"))
			default:
				b.WriteString(param)
			}
			p++
		}
		b.WriteByte(')')
	}
	return b.String()
}

// optionalText is param, or NULL when it is empty.
func optionalText(param string) string {
	return "CASE WHEN DATALENGTH(" + param + ") > 0 THEN " + param + " END"
}

// hexParam converts param, hex digits sent by payload, to varbinary(size).
func hexParam(param, size string) string {
	return "CONVERT(varbinary(" + size + "), " + param + ", 2)"
}
