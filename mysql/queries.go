package mysql

import (
	"fmt"
	"strconv"

	outbox "github.com/relayer-go/watermill-outbox"

	"github.com/relayer-go/watermill-outbox/internal/inscols"
)

// queries is every fixed statement of one outbox, built once from its quoted names.
// Statements whose shape depends on the call (id lists, optional filters, inserts) are
// assembled from the fragments here by the methods that run them.
type queries struct {
	create     []string
	outboxName string // the rows table, quoted and qualified

	// The two hot reads.
	readUnordered, readLane string

	anyUnordered     string // non-locking: is any unordered row eligible?
	claimUnordered   string // locking head of unordered due rows
	claimLaneLocked  string // locking head of one lane (all pending rows, in seq order)
	claimLaneVisible string // non-locking ids of the same head, to detect skipped rows
	laneHead         string // non-locking due and claim instants of the head row
	laneRun          string // non-locking head of one lane (all pending rows, in seq order)
	parkedKeys       string // earliest parked id per ordering key of one lane
	leaseShare       string // lease check that holds a shared lock until commit
	setClaim         string // prefix of the claim UPDATE; the id list follows
	lockedClaim      string // prefix of a locked batch's hand-over to a claim; the id list follows

	lockedDelete string // prefix of a locked batch's DELETE; the id list follows
	lockedFail   string // a locked batch's failure of one row (the row lock is held)

	leaseLive string // "AND EXISTS (...)" fence for ordered mutations

	renewUpdate, renewCount string // prefixes; optional id list and lease fence follow
	complete, release       string // prefixes; id list and fence follow
	completeLane            string // prefix of a lane run's DELETE; id list and fence follow
	failLane                string // a head row's failure; the fence follows

	count, statsLanes, statsParked, maxLane, nextPendingLane string

	park, parkLanes, fail, requeue, purge string

	insert                                       [inscols.All + 1]string // "INSERT INTO ... VALUES " per optional-column set; the rows follow
	listParked, listParkedKey, listParkedNullKey string

	leaseAcquire, leaseHeld, leaseRenew string
	leaseRelease, leases                string

	heartbeat, members, leave string

	inbox                                                              string // quoted, qualified
	inboxRecord, inboxPrune                                            string
	inboxNextConsumer, inboxConsumer, inboxOldest, inboxEstimate       string
	inboxLeaseLock, inboxLeaseInsert, inboxLeaseSet, inboxLeaseRelease string
}

// dbNow is the server's clock, on which lease and heartbeat expiries are set and
// compared; dbUntil is that clock plus a TTL parameter in microseconds.
const (
	dbNow   = `UTC_TIMESTAMP(6)`
	dbUntil = `(UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)`
)

// parkIf moves a row to its parked lane (parkedLane) and status when the first two of
// its parameters (both the park flag) are 1. The flag is bound twice rather than the
// second assignment reading the first: under MariaDB's SIMULTANEOUS_ASSIGNMENT mode every
// assignment sees the row's old values.
const parkIf = `lane = IF(? = 1, -3 - lane, lane), status = IF(? = 1, 'parked', status) `

// parkedLane maps a lane (Unordered included) to the lane value its parked rows hold,
// and back: -3 - lane, below -1 for every lane, so that parked rows sit in the primary
// key apart from the pending ones.
func parkedLane(lane int) int { return -3 - lane }

// laneOf is the lane of a stored lane value (a parked row's is parkedLane(lane)).
func laneOf(v int) int {
	if v < outbox.Unordered {
		return parkedLane(v)
	}
	return v
}

// laneList is "-1,0,...,lanes-1": every lane a pending row can hold, for a statement
// that finds a row by id alone through the primary key (lane, id), one point per lane.
func laneList(lanes int) string {
	b := []byte("-1")
	for l := 0; l < lanes; l++ {
		b = strconv.AppendInt(append(b, ','), int64(l), 10)
	}
	return string(b)
}

// eligibleWhere: pending, due, and no live claim. Parameters: now, now.
const eligibleWhere = `status = 'pending' AND deliver_at <= ? AND (claim_expires_at IS NULL OR claim_expires_at <= ?)`

func newQueries(n names, lanes int) *queries {
	q := &queries{create: createStatements(n), outboxName: n.outbox}
	// The hot reads walk the primary key (lane, seq, id) within one lane: a lane in seq
	// order, the unordered rows (seq -1) in id order; due and claim tests filter on the
	// way (parked rows hold lanes below -1, out of the way). The unordered reads name it,
	// so that no optimizer prefers ix_seq or a scan (TestExplain, both engines).
	q.readUnordered = fmt.Sprintf(`SELECT %s FROM %s FORCE INDEX (PRIMARY) WHERE lane = -1 AND seq = -1 AND id > ? AND %s ORDER BY id LIMIT ?`,
		recordColumns, n.outbox, eligibleWhere)
	q.readLane = fmt.Sprintf(`SELECT %s FROM %s WHERE lane = ? AND id > ? AND %s ORDER BY id LIMIT ?`,
		recordColumns, n.outbox, eligibleWhere)

	q.anyUnordered = fmt.Sprintf(`SELECT 1 FROM %s FORCE INDEX (PRIMARY) WHERE lane = -1 AND seq = -1 AND id > ? AND %s LIMIT 1`, n.outbox, eligibleWhere)
	q.claimUnordered = fmt.Sprintf(`SELECT %s FROM %s FORCE INDEX (PRIMARY) WHERE lane = -1 AND seq = -1 AND id > ? AND %s ORDER BY id LIMIT ? FOR UPDATE SKIP LOCKED`,
		recordColumns, n.outbox, eligibleWhere)
	// A lane is read in seq order, the order its rows were inserted (see schema.go): a
	// range of the primary key (lane, seq, id).
	q.claimLaneLocked = fmt.Sprintf(`SELECT %s FROM %s WHERE status = 'pending' AND lane = ? AND seq > ? ORDER BY seq LIMIT ? FOR UPDATE SKIP LOCKED`,
		recordColumns, n.outbox)
	q.claimLaneVisible = fmt.Sprintf(`SELECT id FROM %s WHERE status = 'pending' AND lane = ? AND seq > ? ORDER BY seq LIMIT ?`, n.outbox)
	q.laneHead = fmt.Sprintf(`SELECT CAST(deliver_at AS CHAR), CAST(claim_expires_at AS CHAR) FROM %s WHERE status = 'pending' AND lane = ? ORDER BY seq LIMIT 1`, n.outbox)
	q.laneRun = fmt.Sprintf(`SELECT %s FROM %s WHERE status = 'pending' AND lane = ? AND seq > ? ORDER BY seq LIMIT ?`, recordColumns, n.outbox)
	q.parkedKeys = fmt.Sprintf(`SELECT ordering_key, MIN(seq) FROM %s WHERE lane = ? AND ordering_key IS NOT NULL GROUP BY ordering_key`, n.outbox)
	// Lease expiries are set and compared on the server's clock (dbNow), never on a
	// caller's: forwarders whose clocks disagree still agree on who holds a lane.
	q.leaseShare = fmt.Sprintf(`SELECT 1 FROM %s WHERE lane = ? AND token = ? AND expires_at > %s LOCK IN SHARE MODE`, n.lanes, dbNow)
	q.setClaim = fmt.Sprintf(`UPDATE %s FORCE INDEX (PRIMARY) SET claim_token = ?, claim_expires_at = ? WHERE lane = ? AND id IN (`, n.outbox)

	q.leaseLive = fmt.Sprintf(` AND EXISTS (SELECT 1 FROM %s WHERE lane = ? AND token = ? AND expires_at > %s)`, n.lanes, dbNow)

	// A live claim of token: claim_expires_at > now. GREATEST never shortens it.
	//
	// The writes by id (renew, release, complete, fail, the locked batch's) name the
	// primary key: the optimizer may otherwise take ix_seq, whose entries hold the whole
	// key too, for an unordered row (seq -1) and look the row up twice. By id list: on a small
	// table the optimizer may otherwise scan it, and a scan in the session's REPEATABLE
	// READ locks every row it reads until the commit, rows of other claims and fresh
	// pending rows among them, which concurrent SKIP LOCKED claims then pass over
	// (TestExplainWritesByIDs). A DELETE is single-table, pinned to the key's order by
	// ORDER BY seq, id LIMIT n (Complete, pinnedIDList): the multi-table form, which
	// takes index hints, walked the whole (lane, seq) range on the (lane, seq, id) key
	// and waited on every row another transaction held there (a writer's uncommitted
	// insert, another batch's locked rows), measured on MariaDB and Oracle MySQL.
	q.renewUpdate = fmt.Sprintf(`UPDATE %s FORCE INDEX (PRIMARY) SET claim_expires_at = GREATEST(claim_expires_at, CAST(? AS DATETIME(6))) WHERE lane = ? AND claim_token = ? AND claim_expires_at > ?`, n.outbox)
	q.renewCount = fmt.Sprintf(`SELECT COUNT(*) FROM %s FORCE INDEX (PRIMARY) WHERE lane = ? AND claim_token = ? AND claim_expires_at > ?`, n.outbox)
	q.release = fmt.Sprintf(`UPDATE %s FORCE INDEX (PRIMARY) SET claim_token = NULL, claim_expires_at = NULL WHERE lane = ? AND claim_token = ? AND claim_expires_at > ?`, n.outbox)
	q.complete = fmt.Sprintf(`DELETE FROM %s WHERE lane = ? AND claim_token = ? AND claim_expires_at > ?`, n.outbox)
	q.completeLane = fmt.Sprintf(`DELETE FROM %s WHERE lane = ? AND status = 'pending'`, n.outbox)

	q.count = fmt.Sprintf(`SELECT COUNT(*) FROM %s WHERE %s`, n.outbox, eligibleWhere)
	q.statsLanes = fmt.Sprintf(`SELECT lane, COUNT(*), CAST(MIN(deliver_at) AS CHAR) FROM %s WHERE %s GROUP BY lane ORDER BY lane`,
		n.outbox, eligibleWhere)
	q.statsParked = fmt.Sprintf(`SELECT COUNT(*) FROM %s WHERE lane < -1`, n.outbox)
	// MAX and MIN of the key's first column, and MIN with a range on it, are one dive
	// each ("Select tables optimized away"): the greatest pending lane, the least
	// parked value (the greatest parked lane), and PendingLanes' walk (every row above
	// lane -1 is pending). statsParked counts the parked range alone.
	q.nextPendingLane = fmt.Sprintf(`SELECT MIN(lane) FROM %s WHERE lane > ?`, n.outbox)
	q.maxLane = fmt.Sprintf(`SELECT COALESCE(MAX(lane), -1), COALESCE(MIN(lane), -1) FROM %s`, n.outbox)

	// Park by id alone: an unordered row is one point of the key (lane -1, seq -1); a
	// lane's row has no id point (the key is (lane, seq, id)), so parkLanes walks the
	// lanes, in a READ COMMITTED transaction that keeps no lock on the rows it passes.
	park := `UPDATE %s FORCE INDEX (PRIMARY) SET status = 'parked', lane = -3 - lane, last_error = ?, claim_token = NULL, claim_expires_at = NULL ` +
		`WHERE %s AND id = ? AND status = 'pending' AND (claim_expires_at IS NULL OR claim_expires_at <= ?)`
	q.park = fmt.Sprintf(park, n.outbox, "lane = -1 AND seq = -1")
	q.parkLanes = fmt.Sprintf(park, n.outbox, "lane IN ("+laneList(lanes)[len("-1,"):]+")")

	// The retry instant is NULL to keep deliver_at; attempts always changes, so affected
	// rows is exact whatever clientFoundRows says.
	q.fail = fmt.Sprintf(`UPDATE %s FORCE INDEX (PRIMARY) SET attempts = attempts + 1, last_error = ?, claim_token = NULL, claim_expires_at = NULL, `+
		`deliver_at = COALESCE(CAST(? AS DATETIME(6)), deliver_at), `+parkIf+
		`WHERE lane = ? AND id = ? AND claim_token = ? AND claim_expires_at > ?`, n.outbox)
	q.failLane = fmt.Sprintf(`UPDATE %s FORCE INDEX (PRIMARY) SET attempts = attempts + 1, last_error = ?, claim_token = NULL, claim_expires_at = NULL, `+
		`deliver_at = COALESCE(CAST(? AS DATETIME(6)), deliver_at), `+parkIf+
		`WHERE lane = ? AND id = ? AND status = 'pending'`, n.outbox)
	q.lockedClaim = fmt.Sprintf(`UPDATE %s FORCE INDEX (PRIMARY) SET claim_token = ?, claim_expires_at = ? WHERE lane = -1 AND seq = -1 AND id IN (`, n.outbox)
	q.lockedDelete = fmt.Sprintf(`DELETE FROM %s WHERE lane = -1 AND seq = -1 AND id IN (`, n.outbox)
	q.lockedFail = fmt.Sprintf(`UPDATE %s FORCE INDEX (PRIMARY) SET attempts = attempts + 1, last_error = ?, `+
		`deliver_at = COALESCE(CAST(? AS DATETIME(6)), deliver_at), `+parkIf+`WHERE lane = -1 AND seq = -1 AND id = ?`, n.outbox)
	q.requeue = fmt.Sprintf(`UPDATE %s SET status = 'pending', lane = -3 - lane, deliver_at = `+dbNow+`, attempts = 0, claim_token = NULL, claim_expires_at = NULL WHERE lane < -1 AND status = 'parked'`, n.outbox)
	q.purge = fmt.Sprintf(`DELETE FROM %s WHERE lane < -1 AND status = 'parked'`, n.outbox)
	for cols := range q.insert {
		q.insert[cols] = insertHead(n.outbox, cols)
	}

	q.listParked = fmt.Sprintf(`SELECT %s FROM %s WHERE lane < -1 AND status = 'parked' AND id > ? ORDER BY id LIMIT ?`, parkedColumns, n.outbox)
	q.listParkedKey = fmt.Sprintf(`SELECT %s FROM %s WHERE lane < -1 AND status = 'parked' AND id > ? AND ordering_key = ? ORDER BY id LIMIT ?`, parkedColumns, n.outbox)
	q.listParkedNullKey = fmt.Sprintf(`SELECT %s FROM %s WHERE lane < -1 AND status = 'parked' AND id > ? AND ordering_key IS NULL ORDER BY id LIMIT ?`, parkedColumns, n.outbox)

	// One autocommit upsert, so that no lock on the lease row outlives the statement (a
	// transaction driven by a client that is paused would hold it and block every
	// takeover). The assignments run left to right, each seeing the ones before: the
	// token changes only when the lease has expired; the rest follow when the row now
	// holds the caller's token (a takeover, or its own lease extended).
	// Parameters: lane, owner, token, TTL, token, token, owner, token, token, TTL.
	q.leaseAcquire = fmt.Sprintf(`INSERT INTO %s (lane, owner, token, expires_at) VALUES (?, ?, ?, %s) ON DUPLICATE KEY UPDATE `+
		`token = IF(expires_at <= %s, ?, token), owner = IF(token = ?, ?, owner), renewals = IF(token = ?, renewals + 1, renewals), `+
		`expires_at = IF(token = ?, GREATEST(expires_at, %s), expires_at)`, n.lanes, dbUntil, dbNow, dbUntil)
	q.leaseHeld = fmt.Sprintf(`SELECT token = ? FROM %s WHERE lane = ?`, n.lanes)
	q.leaseRenew = fmt.Sprintf(`UPDATE %s SET expires_at = GREATEST(expires_at, %s), renewals = renewals + 1 `+
		`WHERE lane = ? AND token = ? AND expires_at > %s`, n.lanes, dbUntil, dbNow)
	q.leaseRelease = fmt.Sprintf(`DELETE FROM %s WHERE lane = ? AND token = ?`, n.lanes)
	q.leases = fmt.Sprintf(`SELECT lane, owner, token, CAST(expires_at AS CHAR), expires_at > %s FROM %s ORDER BY lane`, dbNow, n.lanes)

	q.heartbeat = fmt.Sprintf(`INSERT INTO %s (owner, expires_at) VALUES (?, %s) ON DUPLICATE KEY UPDATE expires_at = %s`, n.nodes, dbUntil, dbUntil)
	q.members = fmt.Sprintf(`SELECT owner FROM %s WHERE expires_at > %s ORDER BY owner`, n.nodes, dbNow)
	q.leave = fmt.Sprintf(`DELETE FROM %s WHERE owner = ?`, n.nodes)

	q.inbox = n.inbox
	// A new pair is inserted (1 row affected); a committed one gets duplicates + 1 (2
	// rows affected, whatever clientFoundRows says: the row always changes). The insert
	// waits for a concurrent inserter's lock on the key and then sees its outcome.
	q.inboxRecord = fmt.Sprintf(`INSERT INTO %s (consumer, message_uuid, processed_at) VALUES (?, ?, ?) `+
		`ON DUPLICATE KEY UPDATE duplicates = duplicates + 1`, n.inbox)
	q.inboxPrune = fmt.Sprintf(`DELETE FROM %s WHERE processed_at < ? ORDER BY processed_at LIMIT ?`, n.inbox)
	// InboxStats' bounded reads (internal/inboxstats): the next consumer is one dive
	// into the primary key (naming duplicates, so that an outdated table says so even
	// when empty); a consumer's figures read at most ? entries of its key range; the
	// oldest entry is one dive into ix_processed_at; the estimate is the engine's statistics.
	q.inboxNextConsumer = fmt.Sprintf(`SELECT consumer, duplicates FROM %s WHERE consumer > ? ORDER BY consumer LIMIT 1`, n.inbox)
	q.inboxConsumer = fmt.Sprintf(`SELECT COUNT(*), CAST(MIN(processed_at) AS CHAR), CAST(COALESCE(SUM(duplicates), 0) AS SIGNED) `+
		`FROM (SELECT processed_at, duplicates FROM %s WHERE consumer = ? ORDER BY message_uuid LIMIT ?) AS t`, n.inbox)
	q.inboxOldest = fmt.Sprintf(`SELECT CAST(MIN(processed_at) AS CHAR) FROM %s`, n.inbox)
	q.inboxEstimate = `SELECT COALESCE(MAX(TABLE_ROWS), 0) FROM information_schema.TABLES WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ?`
	q.inboxLeaseLock = fmt.Sprintf(`SELECT token = ?, expires_at > ? FROM %s WHERE name = 'retention' FOR UPDATE`, n.inboxLease)
	q.inboxLeaseInsert = fmt.Sprintf(`INSERT INTO %s (name, owner, token, expires_at) VALUES ('retention', ?, ?, ?)`, n.inboxLease)
	q.inboxLeaseSet = fmt.Sprintf(`UPDATE %s SET owner = ?, token = ?, expires_at = GREATEST(expires_at, CAST(? AS DATETIME(6))) WHERE name = 'retention'`, n.inboxLease)
	q.inboxLeaseRelease = fmt.Sprintf(`DELETE FROM %s WHERE name = 'retention' AND token = ?`, n.inboxLease)
	return q
}

func (q *queries) inboxTable() string { return q.inbox }
