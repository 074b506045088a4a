package outboxtest

import (
	"database/sql"
	"testing"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
)

// A lane is read in the order its rows were inserted (Record.Seq, assigned by the
// database), never in the order of the ids the writers made: writers on other machines
// have other clocks, and two of them in one millisecond order their ULIDs by chance.
// Since the publisher inserts at commit, after every lock its transaction waited for,
// a transaction that began after another one committed reads after it.
func commitOrderTests() []subtest {
	return []subtest{
		{"LaneFollowsInsertOrderNotIDs", testCommitOrderReverseIDs},
		{"TwoStoresInterleavedCommits", testCommitOrderTwoStores},
		{"ParkedKeyHoldsInLaneOrder", testCommitOrderParkedKey},
		{"CompleteAndFailWithSeqs", testCommitOrderSeqWrites},
	}
}

// reverseIDs returns n lane records of key whose ids descend: the first inserted has
// the greatest id, as when a writer with a clock ahead commits before one behind.
func reverseIDs(key string, n int) []outbox.Record {
	recs := make([]outbox.Record, n)
	for i := range recs {
		recs[n-1-i] = laneRecord(key, at(0))
	}
	return recs
}

// checkSeqs fails unless recs carry increasing positive Seqs.
func checkSeqs(t testing.TB, what string, recs []outbox.Record) {
	t.Helper()
	for i := range recs {
		if recs[i].Seq <= 0 || (i > 0 && recs[i].Seq <= recs[i-1].Seq) {
			t.Fatalf("%s: row %d (%s) has Seq %d after %d; want increasing positive Seqs", what, i, recs[i].ID, recs[i].Seq, recs[max(i-1, 0)].Seq)
		}
	}
}

// Rows committed one transaction after another come back from Head and from an
// ordered claim in commit order although their ids descend, with increasing Seqs.
func testCommitOrderReverseIDs(t *testing.T, h Harness) {
	e := newEnv(t, h)
	key := keysInLane(5, testLanes, 1)[0]
	recs := reverseIDs(key, 6)
	for i := range recs {
		e.insert(recs[i]) // one transaction each, in slice order
	}
	got := e.head(5, 10, at(0), false)
	sameIDs(t, "Head after commits with descending ids", ids(got), ids(recs))
	checkSeqs(t, "Head", got)
	_, claimed := e.claimLane(5, 10, e.acquire(5), at(0), at(time.Minute))
	sameIDs(t, "ordered claim after commits with descending ids", ids(claimed), ids(recs))
	checkSeqs(t, "Claim", claimed)
	// Within one transaction, the records' order is the lane's.
	more := reverseIDs(key, 3)
	e.insert(more...)
	all := e.head(5, 20, at(time.Minute), false) // the claim has expired
	sameIDs(t, "Head after one more transaction", ids(all), append(ids(recs), ids(more)...))
	checkSeqs(t, "Head", all)
}

// Two stores on two pools write one key in turn, each transaction beginning after the
// other's commit, every id taken before all of them in reverse: the lane reads in
// commit order.
func testCommitOrderTwoStores(t *testing.T, h Harness) {
	e := newEnv(t, h)
	db2, err := openClosable(h)
	if err != nil {
		t.Fatalf("open a second pool: %v", err)
	}
	t.Cleanup(func() { _ = db2.Close() })
	s2, err := h.NewStore(db2, e.opts)
	if err != nil {
		t.Fatalf("NewStore on the second pool: %v", err)
	}
	key := keysInLane(2, testLanes, 1)[0]
	recs := reverseIDs(key, 8)
	writers := []struct {
		db *sql.DB
		s  outbox.Store
	}{{h.DB, e.store}, {db2, s2}}
	for i := 0; i < len(recs); i += 2 {
		w := writers[(i/2)%2]
		tx, err := w.db.BeginTx(e.ctx, nil)
		if err != nil {
			t.Fatalf("begin: %v", err)
		}
		if err := w.s.Insert(e.ctx, tx, recs[i:i+2]); err != nil {
			_ = tx.Rollback()
			t.Fatalf("Insert: %v", err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatalf("commit: %v", err)
		}
	}
	got := e.head(2, 20, at(0), false)
	sameIDs(t, "Head after interleaved commits of two stores", ids(got), ids(recs))
	checkSeqs(t, "Head", got)
}

// HoldParkedKeys compares lane order, not ids: a parked row inserted before a pending
// row of its key holds it even when its id is greater, and a parked row inserted after
// holds nothing before it even when its id is smaller.
func testCommitOrderParkedKey(t *testing.T, h Harness) {
	e := newEnv(t, h)
	keys := keysInLane(4, testLanes, 2)
	a, b := keys[0], keys[1]
	ra := reverseIDs(a, 2) // ra[0] (greater id) first
	rb := reverseIDs(b, 2)
	e.insert(ra[0])
	e.insert(rb[0])
	e.insert(ra[1])
	e.insert(rb[1])
	e.park(ra[0].ID, "poison", at(0)) // parked, before ra[1] in the lane
	e.park(rb[1].ID, "poison", at(0)) // parked, after rb[0] in the lane
	got := e.head(4, 10, at(0), true)
	sameIDs(t, "Head holding parked keys", ids(got), idsOf(rb[0]))
}

// Complete and Fail of a lane run given the rows' Seqs change exactly those rows.
func testCommitOrderSeqWrites(t *testing.T, h Harness) {
	e := newEnv(t, h)
	key := keysInLane(6, testLanes, 1)[0]
	recs := reverseIDs(key, 4)
	for i := range recs {
		e.insert(recs[i])
	}
	lease := e.acquire(6)
	run := e.head(6, 10, at(0), false)
	n, err := e.store.Complete(e.ctx, outbox.CompleteParams{IDs: ids(run[:2]), Seqs: []int64{run[0].Seq, run[1].Seq}, Now: at(0), Lane: 6, Lease: lease})
	wantN(t, "Complete of the first two rows with their Seqs", n, err, 2)
	ok, err := e.store.Fail(e.ctx, outbox.FailParams{ID: run[2].ID, Seq: run[2].Seq, Now: at(0), Error: "boom", RetryAt: at(time.Minute), Lane: 6, Lease: lease})
	wantBool(t, "Fail of the third row with its Seq", ok, err, true)
	got := e.head(6, 10, at(time.Minute), false)
	sameIDs(t, "Head after Complete and Fail", ids(got), idsOf(recs[2], recs[3]))
	if got[0].Attempts != 1 || got[0].LastError != "boom" {
		t.Fatalf("failed row: attempts %d, error %q; want 1, boom", got[0].Attempts, got[0].LastError)
	}
	if _, err := e.store.Complete(e.ctx, outbox.CompleteParams{IDs: ids(got), Seqs: []int64{got[0].Seq}, Now: at(0), Lane: 6, Lease: lease}); err == nil {
		t.Fatalf("Complete with %d Seqs for %d IDs: nil error, want one naming Seqs", 1, len(got))
	}
}
