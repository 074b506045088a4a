package postgres

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/relayer-go/watermill-outbox/internal/inscols"
)

// All of the dialect's SQL is built here, once per Store, from the quoted names.

// selectColumns is the column list every read, claim and listing returns; the
// rowScanner scans it in this order. Columns that usually hold their default (transport
// ”, deliver_at = created_at, status 'pending') are read as NULL when they do, and the
// scanner restores the default: database/sql's driver values box every non-NULL text,
// bytea and timestamptz value (an allocation per column and row), and a NULL costs
// nothing.
var selectColumns = prefixed("")

// prefixed returns the select list with every column qualified by alias ("" for none).
func prefixed(alias string) string {
	if alias != "" {
		alias += "."
	}
	return strings.ReplaceAll(`$.id, $.message_uuid, $.lane, $.ordering_key, NULLIF($.transport, ''), $.destination, `+
		`$.message_type, $.headers, $.body, $.tenant_id, $.created_at, NULLIF($.deliver_at, $.created_at), $.attempts, `+
		`$.last_error, NULLIF($.status, 'pending'), $.claim_token, $.claim_expires_at, $.seq`, "$.", alias)
}

// eligible is the eligibility rule over alias with the instant in parameter now.
func eligible(alias, now string) string {
	return fmt.Sprintf("%[1]s.status = 'pending' AND %[1]s.deliver_at <= %[2]s AND (%[1]s.claim_expires_at IS NULL OR %[1]s.claim_expires_at <= %[2]s)", alias, now)
}

// dbNow is the server's clock, on which lease and heartbeat expiries are set and
// compared (never a caller's: forwarders whose clocks disagree still agree on who holds
// a lane); dbUntil is that clock plus a TTL parameter in microseconds.
const dbNow = `statement_timestamp()`

func dbUntil(ttl string) string {
	return `(statement_timestamp() + ` + ttl + `::bigint * interval '1 microsecond')`
}

// liveLease is the fencing condition: the lease token of lane is live on the server's
// clock.
func (q *queries) liveLease(lane, token string) string {
	return fmt.Sprintf("EXISTS (SELECT 1 FROM %s AS f WHERE f.lane = %s AND f.token = %s AND f.expires_at > %s)", q.n.lanes, lane, token, dbNow)
}

// params numbers bind parameters as a statement is assembled from optional parts.
type params struct{ n int }

func (p *params) next() string { p.n++; return fmt.Sprintf("$%d", p.n) }

type queries struct {
	n names

	insert       [shared * 4]string        // unnest, by optional-column set | shared values
	insertValues [valuesMaxRows + 1]string // by row count

	readLane, readUnordered string

	claimUnordered           string
	claimLane, claimLaneHold string
	laneRun                  string // the pending rows of one lane in seq order (Head)
	parkedKeys               string // earliest parked id per ordering key of one lane
	completeLane, failLane   string // a lane run's delete and a head row's failure, fenced

	// A locked batch (BatchLocker): the unordered claim's locking read without the
	// claim, and its delete and failure of rows whose locks it holds.
	lockUnordered, lockedDelete, lockedFail, lockedClaim string

	// indexed by variant: bit 0 = with ids, bit 1 = fenced by a lane lease
	renew   [4]string
	release [4]string
	// indexed by fenced
	complete [2]string
	fail     [2]string

	park         string
	count        string
	stats        string
	pendingLanes string
	maxLane      string
	parked       [3]string // any key, one key, NULL key
	requeue      [3]string // ids, key, NULL key; all = requeueAll
	purge        [3]string
	requeueA     string
	purgeA       string

	acquireLease, renewLease, releaseLease, leases string
	heartbeat, members, leave                      string

	inboxRecord, inboxPrune                                      string
	inboxNextConsumer, inboxConsumer, inboxOldest, inboxEstimate string
	inboxAcquire, inboxRelease                                   string
}

const (
	keyAny = iota
	keyOne
	keyNull
)

func newQueries(n names, lanes int) *queries {
	q := &queries{n: n}
	t := n.outbox

	// One statement for any batch size: one array per column, unnested server-side.
	// Empty strings and the Unordered lane become NULLs here so the client binds plain
	// slices (no per-row wrappers). One statement per set of optional columns: a
	// column no row of the batch uses is not sent (package inscols).
	for cols := range q.insert {
		q.insert[cols] = insertUnnest(t, cols)
	}

	for n := 1; n <= valuesMaxRows; n++ {
		var b strings.Builder
		b.WriteString(`INSERT INTO ` + t + ` (id, message_uuid, lane, ordering_key, transport, destination, message_type, ` +
			`headers, body, tenant_id, created_at, deliver_at) VALUES `)
		for i := range n {
			if i > 0 {
				b.WriteString(", ")
			}
			p := i * 12
			fmt.Fprintf(&b, "($%d, $%d, NULLIF($%d::int4, -1), NULLIF($%d::text, ''), $%d, $%d, NULLIF($%d::text, ''), "+
				"$%d, $%d, NULLIF($%d::text, ''), $%d, $%d)",
				p+1, p+2, p+3, p+4, p+5, p+6, p+7, p+8, p+9, p+10, p+11, p+12)
		}
		q.insertValues[n] = b.String()
	}

	q.readLane = `SELECT ` + selectColumns + ` FROM ` + t + ` AS o WHERE o.lane = $1 AND o.lane IS NOT NULL AND o.id > $2 AND ` +
		eligible("o", "$3") + ` ORDER BY o.id LIMIT $4`
	q.readUnordered = `SELECT ` + selectColumns + ` FROM ` + t + ` AS o WHERE o.lane IS NULL AND o.id > $1 AND ` +
		eligible("o", "$2") + ` ORDER BY o.id LIMIT $3`

	// $1 token, $2 until, $3 now, $4 limit, $5 after. The CTE is evaluated once; FOR UPDATE SKIP
	// LOCKED re-checks eligibility on rows changed since the snapshot and passes over rows
	// other claimers hold locked. "= ANY(ARRAY(...))" pins the update to primary-key
	// lookups: with a join, the generic plan (LIMIT $4 estimated at a tenth of the table)
	// hashes a sequential scan of the whole table.
	q.claimUnordered = `WITH c AS (SELECT s.id FROM ` + t + ` AS s WHERE s.lane IS NULL AND s.id > $5 AND ` + eligible("s", "$3") +
		` ORDER BY s.id LIMIT $4 FOR UPDATE SKIP LOCKED) ` +
		`UPDATE ` + t + ` AS o SET claim_token = $1, claim_expires_at = $2 WHERE o.id = ANY(ARRAY(SELECT id FROM c)) RETURNING ` + prefixed("o")

	// $1 now, $2 limit, $3 after.
	q.lockUnordered = `SELECT ` + selectColumns + ` FROM ` + t + ` AS s WHERE s.lane IS NULL AND s.id > $3 AND ` + eligible("s", "$1") +
		` ORDER BY s.id LIMIT $2 FOR UPDATE SKIP LOCKED`
	q.lockedDelete = `DELETE FROM ` + t + ` WHERE id = ANY($1::bytea[])`
	q.lockedClaim = `UPDATE ` + t + ` SET claim_token = $1, claim_expires_at = $2 WHERE id = ANY($3::bytea[])`
	// $1 id, $2 error, $3 retry at (NULL keeps deliver_at), $4 park.
	q.lockedFail = `UPDATE ` + t + ` SET attempts = attempts + 1, last_error = $2, ` +
		`deliver_at = COALESCE($3::timestamptz, deliver_at), status = CASE WHEN $4::boolean THEN 'parked' ELSE status END ` +
		`WHERE id = $1`

	// $1 lane, $2 after, $3 limit.
	// A lane is read in seq order: the order its rows were inserted (see schema.go).
	q.laneRun = `SELECT ` + selectColumns + ` FROM ` + t + ` AS o WHERE o.lane = $1 AND o.lane IS NOT NULL AND o.status = 'pending' AND o.seq > $2 ORDER BY o.seq LIMIT $3`
	q.parkedKeys = `SELECT ordering_key, min(seq) FROM ` + t + ` WHERE status = 'parked' AND lane = $1 AND ordering_key IS NOT NULL GROUP BY ordering_key`
	// $1 ids, $2 lane, $3 lease.
	q.completeLane = `DELETE FROM ` + t + ` WHERE id = ANY($1::bytea[]) AND lane = $2 AND status = 'pending' AND ` + q.liveLease("$2", "$3")
	// $1 id, $2 error, $3 retry at (NULL keeps deliver_at), $4 park, $5 lane, $6 lease.
	q.failLane = `UPDATE ` + t + ` SET attempts = attempts + 1, last_error = $2, claim_token = NULL, claim_expires_at = NULL, ` +
		`deliver_at = COALESCE($3::timestamptz, deliver_at), status = CASE WHEN $4::boolean THEN 'parked' ELSE status END ` +
		`WHERE id = $1 AND lane = $5 AND status = 'pending' AND ` + q.liveLease("$5", "$6")

	q.claimLane = q.buildClaimLane(false)
	q.claimLaneHold = q.buildClaimLane(true)

	for v := range q.renew {
		q.renew[v] = q.buildRenew(v&1 != 0, v&2 != 0)
		q.release[v] = q.buildRelease(v&1 != 0, v&2 != 0)
	}
	for v := range q.complete {
		q.complete[v] = q.buildComplete(v == 1)
		q.fail[v] = q.buildFail(v == 1)
	}

	q.park = `UPDATE ` + t + ` SET status = 'parked', last_error = $2, claim_token = NULL, claim_expires_at = NULL ` +
		`WHERE id = $1 AND status = 'pending' AND (claim_expires_at IS NULL OR claim_expires_at <= $3)`

	q.count = `SELECT count(*) FROM ` + t + ` AS o WHERE ` + eligible("o", "$1")
	// One statement so the lanes and the parked count come from one snapshot.
	q.stats = `SELECT false, o.lane, count(*), min(o.deliver_at) FROM ` + t + ` AS o WHERE ` + eligible("o", "$1") +
		` GROUP BY o.lane UNION ALL SELECT true, NULL, count(*), NULL FROM ` + t + ` WHERE status = 'parked'`
	// Each half is answered from a partial index (pending lanes; the few parked rows).
	// One index probe per lane of Options.Lanes (equality on the pending lanes' partial
	// index, LIMIT 1). Not a recursive loose index scan: its estimate multiplies a
	// subplan planned on the inequality's default selectivity (a bitmap scan and sort of
	// a third of the table, per step), which puts the statement above jit_above_cost on
	// a large backlog: PostgreSQL then JIT-compiled the probe on every call, 150-370 ms
	// of server CPU each (auto_explain, 100,000 unordered rows, 2026-12-05). Equality
	// on a literal keeps the estimate at a few index probes in every state of the
	// statistics (TestExplainHotReads).
	q.pendingLanes = `SELECT g.lane FROM generate_series(0, ` + strconv.Itoa(lanes-1) + `) AS g(lane) ` +
		`CROSS JOIN LATERAL (SELECT 1 FROM ` + t + ` AS o WHERE o.status = 'pending' AND o.lane IS NOT NULL AND o.lane = g.lane LIMIT 1) AS p ` +
		`ORDER BY g.lane`
	q.maxLane = `SELECT GREATEST((SELECT max(lane) FROM ` + t + ` WHERE status = 'pending' AND lane IS NOT NULL), ` +
		`(SELECT max(lane) FROM ` + t + ` WHERE status = 'parked'))`

	// The listing reads the payload's first $n bytes (the last parameter) and its length.
	list := func(n string) string {
		return `SELECT ` + strings.Replace(selectColumns, "headers, body,", "headers, substring(body from 1 for "+n+"),", 1) +
			`, octet_length(body) FROM ` + t + ` WHERE status = 'parked' AND id > $1`
	}
	q.parked[keyAny] = list("$3") + ` ORDER BY id LIMIT $2`
	q.parked[keyOne] = list("$4") + ` AND ordering_key = $3 ORDER BY id LIMIT $2`
	q.parked[keyNull] = list("$3") + ` AND ordering_key IS NULL ORDER BY id LIMIT $2`

	requeue := `UPDATE ` + t + ` SET status = 'pending', deliver_at = ` + dbNow + `, attempts = 0 WHERE status = 'parked'`
	q.requeue[keyAny] = requeue + ` AND id = ANY($1::bytea[])`
	q.requeue[keyOne] = requeue + ` AND ordering_key = $1`
	q.requeue[keyNull] = requeue + ` AND ordering_key IS NULL`
	q.requeueA = requeue
	purge := `DELETE FROM ` + t + ` WHERE status = 'parked'`
	q.purge[keyAny] = purge + ` AND id = ANY($1::bytea[])`
	q.purge[keyOne] = purge + ` AND ordering_key = $1`
	q.purge[keyNull] = purge + ` AND ordering_key IS NULL`
	q.purgeA = purge

	// $1 lane, $2 owner, $3 token, $4 TTL (µs). INSERT ... ON CONFLICT is atomic against
	// a concurrent acquirer; the WHERE lets through only a free (expired) lane or the
	// holder's own token.
	q.acquireLease = `INSERT INTO ` + n.lanes + ` AS l (lane, owner, token, expires_at) VALUES ($1, $2, $3, ` + dbUntil("$4") + `) ` +
		`ON CONFLICT (lane) DO UPDATE SET owner = EXCLUDED.owner, token = EXCLUDED.token, ` +
		`expires_at = CASE WHEN l.token = EXCLUDED.token AND l.expires_at > ` + dbNow + ` ` +
		`THEN GREATEST(l.expires_at, EXCLUDED.expires_at) ELSE EXCLUDED.expires_at END ` +
		`WHERE l.expires_at <= ` + dbNow + ` OR l.token = EXCLUDED.token`
	// $1 lane, $2 token, $3 TTL (µs).
	q.renewLease = `UPDATE ` + n.lanes + ` SET expires_at = GREATEST(expires_at, ` + dbUntil("$3") + `) WHERE lane = $1 AND token = $2 AND expires_at > ` + dbNow
	q.releaseLease = `DELETE FROM ` + n.lanes + ` WHERE lane = $1 AND token = $2`
	q.leases = `SELECT lane, owner, token, expires_at, expires_at > ` + dbNow + ` FROM ` + n.lanes + ` ORDER BY lane`

	// $1 owner, $2 TTL (µs).
	q.heartbeat = `INSERT INTO ` + n.nodes + ` AS m (owner, expires_at) VALUES ($1, ` + dbUntil("$2") + `) ` +
		`ON CONFLICT (owner) DO UPDATE SET expires_at = EXCLUDED.expires_at`
	// COLLATE "C" sorts by bytes, as Go sorts strings.
	q.members = `SELECT owner FROM ` + n.nodes + ` WHERE expires_at > ` + dbNow + ` ORDER BY owner COLLATE "C"`
	q.leave = `DELETE FROM ` + n.nodes + ` WHERE owner = $1`

	// ON CONFLICT waits for a concurrent inserter of the same key and then sees its
	// outcome: after its commit the entry's duplicates is raised (RETURNING gives at
	// least 1), after its rollback our row is inserted (RETURNING gives 0). Unlike a
	// unique violation it leaves the transaction usable.
	q.inboxRecord = `INSERT INTO ` + n.inbox + ` AS i (consumer, message_uuid, processed_at) VALUES ($1, $2, $3) ` +
		`ON CONFLICT (consumer, message_uuid) DO UPDATE SET duplicates = i.duplicates + 1 RETURNING duplicates`
	// "= ANY(ARRAY(...))" pins the delete to a TID scan of the batch the age index
	// yields, in the generic plan too (a join let the generic plan scan the whole
	// table). The batch's rows are locked (FOR UPDATE) within the statement, so their
	// ctids stay put; a version a duplicate wrote after the statement's snapshot is not
	// visible to it and waits for the next batch.
	q.inboxPrune = `DELETE FROM ` + n.inbox + ` WHERE ctid = ANY(ARRAY(SELECT ctid FROM ` + n.inbox +
		` WHERE processed_at < $1 ORDER BY processed_at LIMIT $2 FOR UPDATE SKIP LOCKED))`
	// InboxStats' bounded reads (internal/inboxstats): the next consumer is one dive
	// into the primary key (naming duplicates, so that an outdated table says so even
	// when empty); a consumer's figures read at most $2 entries of its key range; the
	// oldest entry is one dive into the age index; the estimate is the planner's.
	q.inboxNextConsumer = `SELECT consumer, duplicates FROM ` + n.inbox + ` WHERE consumer > $1 ORDER BY consumer LIMIT 1`
	q.inboxConsumer = `SELECT count(*), min(processed_at), coalesce(sum(duplicates), 0)::bigint ` +
		`FROM (SELECT processed_at, duplicates FROM ` + n.inbox + ` WHERE consumer = $1 ORDER BY message_uuid LIMIT $2) AS t`
	q.inboxOldest = `SELECT min(processed_at) FROM ` + n.inbox
	q.inboxEstimate = `SELECT coalesce(max(greatest(reltuples, 0)), 0)::bigint FROM pg_class WHERE oid = to_regclass($1)`
	// $1 owner, $2 token, $3 now, $4 until.
	q.inboxAcquire = `INSERT INTO ` + n.inboxLease + ` AS l (name, owner, token, expires_at) VALUES ('retention', $1, $2, $4) ` +
		`ON CONFLICT (name) DO UPDATE SET owner = EXCLUDED.owner, token = EXCLUDED.token, ` +
		`expires_at = GREATEST(l.expires_at, EXCLUDED.expires_at) ` +
		`WHERE l.expires_at <= $3 OR l.token = EXCLUDED.token`
	q.inboxRelease = `DELETE FROM ` + n.inboxLease + ` WHERE name = 'retention' AND token = $1`
	return q
}

// buildClaimLane claims the head run of one lane in one statement.
// $1 token, $2 until, $3 now, $4 limit, $5 lane, $6 lease.
//
//   - lease: the caller's lease must be live; FOR SHARE makes a concurrent takeover wait
//     for this statement (and re-checks the token if one committed meanwhile).
//   - head: the first $4 pending rows of the lane in seq order (rows held by a parked key
//     left out), each marked eligible or not.
//   - run: the leading eligible ones; the first row not due or claimed by someone else
//     ends the run, so it holds the rest of the lane.
//   - locked: the run's rows locked, SKIP LOCKED, eligibility re-checked on the newest
//     row versions.
//   - the update takes locked rows only up to the first run row that could not be
//     locked, so the claimed rows are always a prefix of the lane.
func (q *queries) buildClaimLane(holdParkedKeys bool) string {
	t := q.n.outbox
	hold := ""
	if holdParkedKeys {
		hold = ` AND NOT (h.ordering_key IS NOT NULL AND EXISTS (SELECT 1 FROM ` + t + ` AS p ` +
			`WHERE p.status = 'parked' AND p.ordering_key = h.ordering_key AND p.lane = $5 AND p.seq < h.seq))`
	}
	return `WITH lease AS (SELECT 1 FROM ` + q.n.lanes + ` AS f WHERE f.lane = $5 AND f.token = $6 AND f.expires_at > ` + dbNow + ` FOR SHARE), ` +
		`head AS (SELECT h.id, h.seq, (h.deliver_at <= $3 AND (h.claim_expires_at IS NULL OR h.claim_expires_at <= $3)) AS ok ` +
		`FROM ` + t + ` AS h WHERE h.lane = $5 AND h.lane IS NOT NULL AND h.status = 'pending' AND EXISTS (SELECT 1 FROM lease)` + hold +
		` ORDER BY h.seq LIMIT $4), ` +
		`run AS (SELECT r.id, r.seq FROM (SELECT id, seq, bool_and(ok) OVER (ORDER BY seq) AS open FROM head) AS r WHERE r.open), ` +
		`locked AS (SELECT s.id FROM ` + t + ` AS s WHERE s.id IN (SELECT id FROM run) AND s.lane = $5 AND ` + eligible("s", "$3") +
		` ORDER BY s.seq FOR UPDATE SKIP LOCKED) ` +
		`UPDATE ` + t + ` AS o SET claim_token = $1, claim_expires_at = $2 WHERE o.id = ANY(ARRAY(SELECT id FROM locked)) ` +
		`AND NOT EXISTS (SELECT 1 FROM run WHERE run.seq < o.seq AND run.id NOT IN (SELECT id FROM locked)) ` +
		`RETURNING ` + prefixed("o")
}

// buildRenew: $1 token, $2 now, $3 until, then [ids], then [lane, lease].
func (q *queries) buildRenew(withIDs, fenced bool) string {
	p := params{n: 3}
	s := `UPDATE ` + q.n.outbox + ` SET claim_expires_at = GREATEST(claim_expires_at, $3) ` +
		`WHERE claim_token = $1 AND claim_expires_at > $2 AND status = 'pending'`
	if withIDs {
		s += ` AND id = ANY(` + p.next() + `::bytea[])`
	}
	if fenced {
		lane, lease := p.next(), p.next()
		s += ` AND lane = ` + lane + ` AND ` + q.liveLease(lane, lease)
	}
	return s
}

// buildRelease: $1 token, $2 now, then [ids], then [lane, lease].
func (q *queries) buildRelease(withIDs, fenced bool) string {
	p := params{n: 2}
	s := `UPDATE ` + q.n.outbox + ` SET claim_token = NULL, claim_expires_at = NULL ` +
		`WHERE claim_token = $1 AND claim_expires_at > $2 AND status = 'pending'`
	if withIDs {
		s += ` AND id = ANY(` + p.next() + `::bytea[])`
	}
	if fenced {
		lane, lease := p.next(), p.next()
		s += ` AND lane = ` + lane + ` AND ` + q.liveLease(lane, lease)
	}
	return s
}

// buildComplete: $1 token, $2 now, $3 ids, then [lane, lease].
func (q *queries) buildComplete(fenced bool) string {
	s := `DELETE FROM ` + q.n.outbox + ` WHERE id = ANY($3::bytea[]) AND claim_token = $1 AND claim_expires_at > $2`
	if fenced {
		s += ` AND lane = $4 AND ` + q.liveLease("$4", "$5")
	}
	return s
}

// buildFail: $1 id, $2 token, $3 now, $4 error, $5 retry at (NULL keeps deliver_at),
// $6 park, then [lane, lease].
func (q *queries) buildFail(fenced bool) string {
	s := `UPDATE ` + q.n.outbox + ` SET attempts = attempts + 1, last_error = $4, claim_token = NULL, claim_expires_at = NULL, ` +
		`deliver_at = COALESCE($5::timestamptz, deliver_at), status = CASE WHEN $6::boolean THEN 'parked' ELSE status END ` +
		`WHERE id = $1 AND claim_token = $2 AND claim_expires_at > $3 AND status = 'pending'`
	if fenced {
		s += ` AND lane = $7 AND ` + q.liveLease("$7", "$8")
	}
	return s
}

// The batch-wide values of an unnest INSERT, as bits above the optional-column set: a
// batch whose rows share their destination or their created_at (as a Publish call's
// rows do) sends it once as a scalar rather than as an array of equal elements.
const (
	shared        = inscols.All + 1
	sharedDest    = shared
	sharedCreated = shared << 1
)

// insertUnnest is the unnest INSERT naming the optional columns of cols; deliver_at
// is created_at when the batch sends no deliver_at array. Parameters are numbered in
// column order, arrays and scalars alike (unnestArgs binds them in that order).
func insertUnnest(t string, cols int) string {
	var names, sel, arrays, alias []string
	created := ""
	add := func(bit int, name, expr, typ, a string) {
		if bit != 0 && cols&bit == 0 {
			return
		}
		p := fmt.Sprintf("$%d", len(names)+1)
		names = append(names, name)
		sel = append(sel, expr)
		arrays = append(arrays, p+"::"+typ+"[]")
		alias = append(alias, a)
	}
	scalar := func(name, typ string) string {
		p := fmt.Sprintf("$%d::%s", len(names)+1, typ)
		names = append(names, name)
		sel = append(sel, p)
		return p
	}
	add(0, "id", "u.id", "bytea", "id")
	add(0, "message_uuid", "u.mu", "text", "mu")
	add(inscols.Lane, "lane", "NULLIF(u.lane, -1)", "int4", "lane")
	add(inscols.Key, "ordering_key", "NULLIF(u.ok, '')", "text", "ok")
	add(inscols.Transport, "transport", "u.tr", "text", "tr")
	if cols&sharedDest != 0 {
		scalar("destination", "text")
	} else {
		add(0, "destination", "u.dst", "text", "dst")
	}
	add(inscols.Type, "message_type", "NULLIF(u.mt, '')", "text", "mt")
	add(0, "headers", "u.h", "bytea", "h")
	add(0, "body", "u.b", "bytea", "b")
	add(inscols.Tenant, "tenant_id", "NULLIF(u.tn, '')", "text", "tn")
	if cols&sharedCreated != 0 {
		created = scalar("created_at", "timestamptz")
	} else {
		add(0, "created_at", "u.ca", "timestamptz", "ca")
		created = "u.ca"
	}
	add(inscols.Deliver, "deliver_at", "u.da", "timestamptz", "da")
	if cols&inscols.Deliver == 0 {
		names = append(names, "deliver_at")
		sel = append(sel, created)
	}
	return `INSERT INTO ` + t + ` (` + strings.Join(names, ", ") + `) SELECT ` + strings.Join(sel, ", ") +
		` FROM unnest(` + strings.Join(arrays, ", ") + `) AS u(` + strings.Join(alias, ", ") + `)`
}
