package mysql

import (
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
		"head of lane":            bind(s.q.readLane, int64(lane), zero[:], at, at, int64(limit)),
		"unordered due":           bind(s.q.readUnordered, zero[:], at, at, int64(limit)),
		"claim head of lane":      bind(s.q.claimLaneLocked, int64(lane), zero[:], int64(limit)),
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
	return map[string]string{
		"complete":      bind(s.q.complete+list, token[:], at),
		"complete lane": bind(s.q.completeLane+list, int64(lane)),
		"renew":         bind(s.q.renewUpdate+list, at, token[:], at),
		"release":       bind(s.q.release+list, token[:], at),
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
