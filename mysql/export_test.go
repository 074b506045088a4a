package mysql

import (
	"strconv"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
)

// SetAfterLock installs a hook that runs inside every claim transaction once its rows
// are locked (tests hold the transaction open with it).
func SetAfterLock(s *Store, fn func()) { s.afterLock = fn }

// HotStatements returns the statements of the two hot reads, of the two claims and of
// their idle checks, as
// the store sends them for lane, now and limit (values inlined), for EXPLAIN.
func HotStatements(s *Store, lane int, now time.Time, limit int) map[string]string {
	at, err := timeArg(now)
	if err != nil {
		panic(err)
	}
	var zero outbox.ID
	return map[string]string{
		"head of lane":            bind(s.q.laneRun, int64(lane), int64(0), int64(limit)),
		"unordered due":           bind(s.q.readUnordered, zero[:], at, at, int64(limit)),
		"claim head of lane":      bind(s.q.claimLaneLocked, int64(lane), int64(0), int64(limit)),
		"claim unordered":         bind(s.q.claimUnordered, zero[:], at, at, int64(limit)),
		"idle check of lane":      bind(s.q.laneHead, int64(lane)),
		"idle check of unordered": bind(s.q.anyUnordered, zero[:], at, at),
	}
}

// Translate is the driver-error translation every method applies at its edge.
var Translate = translate

// InboxStatements returns the inbox's record and prune statements as the store sends
// them (values inlined), for EXPLAIN and handler counters.
func InboxStatements(s *Store, consumer, uuid string, at time.Time, limit int) map[string]string {
	a, err := timeArg(at)
	if err != nil {
		panic(err)
	}
	return map[string]string{
		"record": bind(s.q.inboxRecord, consumer, uuid, a),
		"lookup": "SELECT 1 FROM " + s.q.inboxTable() + " WHERE consumer = " + string(appendLiteral(nil, consumer)) +
			" AND message_uuid = " + string(appendLiteral(nil, uuid)),
		"prune": bind(s.q.inboxPrune, a, int64(limit)),
	}
}

// WritesByIDs returns the store's writes by id list (token complete, lane-run complete,
// renew, release) for ids, as it sends them (values inlined, without a lease fence),
// for EXPLAIN.
func WritesByIDs(s *Store, ids []outbox.ID, token outbox.Token, now time.Time, lane int) map[string]string {
	at, err := timeArg(now)
	if err != nil {
		panic(err)
	}
	list := " AND id IN (" + string(appendIDList(nil, ids)) + ")"
	unordered := string(appendSeqs([]byte(list), outbox.Unordered, 0, nil))
	seqs := string(appendSeqs([]byte(list), lane, len(ids), func(i int) int64 { return int64(i + 1) }))
	pin := " ORDER BY seq, id LIMIT " + strconv.Itoa(len(ids)) // as Complete sends it
	return map[string]string{
		"complete":           bind(s.q.complete+unordered+pin, int64(outbox.Unordered), token[:], at),
		"complete lane":      bind(s.q.completeLane+seqs+pin, int64(lane)),
		"renew":              bind(s.q.renewUpdate+unordered, at, int64(outbox.Unordered), token[:], at),
		"renew count":        bind(s.q.renewCount+unordered, int64(outbox.Unordered), token[:], at),
		"release":            bind(s.q.release+unordered, int64(outbox.Unordered), token[:], at),
		"locked batch done":  pinnedIDList(s.q.lockedDelete, ids),
		"locked batch claim": bind(pinnedIDList(s.q.lockedClaim, ids), token[:], at),
		"park by id alone":   bind(s.q.park, "reason", ids[0][:], at),
		"fail":               bind(string(appendSeqs([]byte(s.q.fail), outbox.Unordered, 0, nil)), "e", []byte(nil), int64(1), int64(1), int64(outbox.Unordered), ids[0][:], token[:], at),
		"fail head row":      bind(string(appendSeqs([]byte(s.q.failLane), lane, 1, func(int) int64 { return 1 })), "e", []byte(nil), int64(0), int64(0), int64(lane), ids[0][:]),
		"locked batch fail":  bind(s.q.lockedFail, "e", []byte(nil), int64(0), int64(0), ids[0][:]),
	}
}

// PreparedInserts returns how many prepared group INSERTs s holds.
func PreparedInserts(s *Store) int {
	s.stmts.mu.Lock()
	defer s.stmts.mu.Unlock()
	return len(s.stmts.stmts)
}

// PreparedRows is the row count of a prepared group INSERT.
const PreparedRows = preparedRows

// LaneList is the list of every lane a pending row can hold ("-1,0,...").
var LaneList = laneList

// ParkedStatements returns the parked listings and count (values inlined), for EXPLAIN.
func ParkedStatements(s *Store, limit int) map[string]string {
	var zero outbox.ID
	return map[string]string{
		"list parked":        bind(s.q.listParked, int64(1024), zero[:], int64(limit)),
		"list parked of key": bind(s.q.listParkedKey, int64(1024), zero[:], []byte("key-1"), int64(limit)),
		"count parked":       s.q.statsParked,
		"parked keys":        bind(s.q.parkedKeys, int64(parkedLane(5))),
	}
}

// FindStatements returns FindRows' statements for q (values inlined), for EXPLAIN.
func FindStatements(s *Store, q outbox.FindQuery, indexed bool) []string {
	var out []string
	for _, st := range findStatements(s.q.outboxName, s.opts.Lanes, q.WithDefaults(), indexed) {
		out = append(out, bind(st.query, st.args...))
	}
	return out
}

// FindInboxStatements returns FindInbox's two statements for uuid and consumers
// (values inlined), for EXPLAIN.
func FindInboxStatements(s *Store, uuid string, consumers []string) (list, entries string) {
	args := make([]any, 0, len(consumers)+1)
	for _, c := range consumers {
		args = append(args, []byte(c))
	}
	return inboxConsumersStatement(s.q.inbox), bind(inboxFindStatement(s.q.inbox, len(consumers)), append(args, []byte(uuid))...)
}

// LockedRowsStatements returns LockedRows' two reads of ids, for EXPLAIN.
func LockedRowsStatements(s *Store, ids []outbox.ID) (free, present string) {
	return lockedRowsStatements(s.q.outboxName, ids)
}
