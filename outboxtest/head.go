package outboxtest

import (
	"context"
	"testing"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
)

// The reads and writes of a lane worker under a live lease: Head reads the head run of
// its lane without claiming it; Complete and Fail with a zero Token change the lane's
// rows fenced by the lease alone.
func headTests() []subtest {
	return []subtest{
		{"RunInIDOrderWithoutWrites", testHeadRunNoWrites},
		{"NotDueOrClaimedRowHoldsLane", testHeadHolds},
		{"ParkedRows", testHeadParked},
		{"HoldParkedKeysAcrossPages", testHeadParkedPages},
		{"CompleteRunFencedByLease", testHeadCompleteRun},
		{"FailHeadRowFencedByLease", testHeadFail},
		{"LockedHeadNotSkipped", testHeadLocked},
	}
}

func (e *env) head(lane, limit int, now time.Time, hold bool) []outbox.Record {
	e.t.Helper()
	got, err := e.store.Head(e.ctx, outbox.HeadQuery{Lane: lane, Limit: limit, Now: now, HoldParkedKeys: hold}, nil)
	if err != nil {
		e.t.Fatalf("Head(lane %d): %v", lane, err)
	}
	return got
}

// Head returns the lane's pending rows in ID order up to Limit, only of that lane, whole
// (checkRecord), and changes nothing: the same call returns the same rows, unclaimed,
// and no lease is needed to read.
func testHeadRunNoWrites(t *testing.T, h Harness) {
	e := newEnv(t, h)
	recs := e.laneRows(2, 5)
	e.insert(laneRecord(keysInLane(3, testLanes, 1)[0], at(0)), NewRecord(at(0)))
	got := e.head(2, 3, at(0), false)
	sameIDs(t, "Head limit 3", ids(got), idsOf(recs[:3]...))
	for i := range got {
		checkRecord(t, "head row", got[i], stored(recs[i]))
	}
	sameIDs(t, "Head again (nothing changed)", ids(e.head(2, 10, at(0), false)), ids(recs))
	// The rows are still claimable by anyone: Head wrote no claim.
	_, claimed := e.claimLane(2, 10, e.acquire(2), at(0), at(time.Minute))
	sameIDs(t, "claim after Head", ids(claimed), ids(recs))
	if got := e.head(4, 10, at(0), false); len(got) != 0 {
		t.Fatalf("Head of an empty lane = %s", idList(ids(got)))
	}
	// Reusing dst: the same rows come back in dst's storage.
	dst := make([]outbox.Record, 0, 16)
	got2, err := e.store.Head(e.ctx, outbox.HeadQuery{Lane: 3, Limit: 10, Now: at(0)}, dst)
	if err != nil || len(got2) != 1 || &got2[0] != &dst[:1][0] {
		t.Fatalf("Head into dst = %d rows, %v; want 1 row in dst's storage", len(got2), err)
	}
}

// A row that is not due, or that holds another live claim, ends the run: the rows
// behind it are not returned, however due they are.
func testHeadHolds(t *testing.T, h Harness) {
	e := newEnv(t, h)
	keys := keysInLane(5, testLanes, 2)
	var recs []outbox.Record
	for i := 0; i < 4; i++ {
		recs = append(recs, laneRecord(keys[i%2], at(0)))
	}
	recs[2].DeliverAt = at(time.Minute)
	e.insert(recs...)
	sameIDs(t, "Head before the row not due", ids(e.head(5, 10, at(0), false)), idsOf(recs[:2]...))
	sameIDs(t, "Head once it is due", ids(e.head(5, 10, at(time.Minute), false)), ids(recs))

	// A live claim on the head (an ordered Claim of an older forwarder) holds the lane
	// until it expires.
	_, claimed := e.claimLane(5, 1, e.acquire(5), at(0), at(time.Second))
	sameIDs(t, "claim of the head", ids(claimed), idsOf(recs[0]))
	if got := e.head(5, 10, at(time.Second-us), false); len(got) != 0 {
		t.Fatalf("Head with a claimed head row = %s, want nothing", idList(ids(got)))
	}
	sameIDs(t, "Head once the claim expired", ids(e.head(5, 10, at(time.Minute), false)), ids(recs))
}

// Parked rows are never returned. Without HoldParkedKeys they do not hold anything;
// with it, the later rows of a parked key are passed over while the other keys flow.
func testHeadParked(t *testing.T, h Harness) {
	e := newEnv(t, h)
	keys := keysInLane(1, testLanes, 2)
	a1, b1, a2, b2 := laneRecord(keys[0], at(0)), laneRecord(keys[1], at(0)), laneRecord(keys[0], at(0)), laneRecord(keys[1], at(0))
	e.insert(a1, b1, a2, b2)
	e.park(a1.ID, "poison", at(0))
	sameIDs(t, "Head without HoldParkedKeys", ids(e.head(1, 10, at(0), false)), idsOf(b1, a2, b2))
	sameIDs(t, "Head with HoldParkedKeys", ids(e.head(1, 10, at(0), true)), idsOf(b1, b2))
	sameIDs(t, "Head with HoldParkedKeys, limit 1", ids(e.head(1, 1, at(0), true)), idsOf(b1))
}

// HoldParkedKeys finds the other keys' rows behind more held rows than Limit (Head reads
// further pages).
func testHeadParkedPages(t *testing.T, h Harness) {
	e := newEnv(t, h)
	keys := keysInLane(6, testLanes, 2)
	poison := laneRecord(keys[0], at(0))
	held := make([]outbox.Record, 7)
	for i := range held {
		held[i] = laneRecord(keys[0], at(0))
	}
	free := laneRecord(keys[1], at(0))
	e.insert(append(append([]outbox.Record{poison}, held...), free)...)
	e.park(poison.ID, "poison", at(0))
	sameIDs(t, "Head limit 2 behind 7 held rows", ids(e.head(6, 2, at(0), true)), idsOf(free))
}

// Complete with a zero Token deletes the listed pending rows of the lane, fenced by the
// lease: ids of another lane, unordered or parked rows among them are not deleted.
func testHeadCompleteRun(t *testing.T, h Harness) {
	e := newEnv(t, h)
	recs := e.laneRows(3, 4)
	other := laneRecord(keysInLane(4, testLanes, 1)[0], at(0))
	u := NewRecord(at(0))
	e.insert(other, u)
	e.park(recs[3].ID, "p", at(0))
	lease := e.acquire(3)
	run := e.head(3, 10, at(0), false)
	sameIDs(t, "Head", ids(run), idsOf(recs[:3]...))
	all := append(ids(recs), other.ID, u.ID)
	n := e.complete(outbox.CompleteParams{IDs: all, Now: at(0), Lane: 3, Lease: lease})
	if n != 3 {
		t.Fatalf("Complete of the lane run = %d, want 3", n)
	}
	if got := e.head(3, 10, at(0), false); len(got) != 0 {
		t.Fatalf("Head after Complete = %s, want nothing", idList(ids(got)))
	}
	if n := e.rawCount(e.opts.OutboxTable()); n != 3 {
		t.Fatalf("rows left %d, want 3 (the other lane's, the unordered and the parked row)", n)
	}
}

// Fail with a zero Token records a failed attempt of a pending head row of the lane,
// fenced by the lease: it moves DeliverAt (the row then holds the lane) or parks it.
func testHeadFail(t *testing.T, h Harness) {
	e := newEnv(t, h)
	recs := e.laneRows(7, 2)
	lease := e.acquire(7)
	if e.fail(outbox.FailParams{ID: recs[0].ID, Now: at(0), Error: "x", RetryAt: at(time.Minute), Lane: 6, Lease: lease}) {
		t.Fatalf("Fail with another lane = true")
	}
	if !e.fail(outbox.FailParams{ID: recs[0].ID, Now: at(0), Error: "boom", RetryAt: at(time.Minute), Lane: 7, Lease: lease}) {
		t.Fatalf("Fail of the head row = false")
	}
	if got := e.head(7, 10, at(time.Second), false); len(got) != 0 {
		t.Fatalf("Head with the failed head not due = %s, want nothing", idList(ids(got)))
	}
	got := e.head(7, 10, at(time.Minute), false)
	sameIDs(t, "Head once the failed row is due", ids(got), ids(recs))
	if got[0].Attempts != 1 || got[0].LastError != "boom" {
		t.Fatalf("failed row: attempts %d, error %q; want 1, boom", got[0].Attempts, got[0].LastError)
	}
	if !e.fail(outbox.FailParams{ID: recs[0].ID, Now: at(time.Minute), Error: "again", Park: true, Lane: 7, Lease: lease}) {
		t.Fatalf("Fail with Park = false")
	}
	sameIDs(t, "Head after the park", ids(e.head(7, 10, at(time.Minute), false)), idsOf(recs[1]))
}

// Head never skips a head row another transaction has locked (the old owner's fenced
// delete during a takeover, an operator's Park, a writer's update) to return the rows
// behind it, which a lane worker would then send first: it returns the run from the
// head (reading the committed row, or after waiting for the lock), or nothing.
func testHeadLocked(t *testing.T, h Harness) {
	e := newEnv(t, h)
	recs := e.laneRows(2, 3)
	release := e.lockRow(recs[0])
	go func() {
		time.Sleep(2 * time.Second)
		release()
	}()
	ctx, cancel := context.WithTimeout(e.ctx, 20*time.Second)
	defer cancel()
	got, err := e.store.Head(ctx, outbox.HeadQuery{Lane: 2, Limit: 10, Now: at(0)}, nil)
	if err != nil {
		t.Fatalf("Head with a locked head row: %v", err)
	}
	if len(got) > 0 {
		sameIDs(t, "Head with a locked head row", ids(got), ids(recs))
		return
	}
	release()
	sameIDs(t, "Head after the head's lock is released", ids(e.head(2, 10, at(0), false)), ids(recs))
}
