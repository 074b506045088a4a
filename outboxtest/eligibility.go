package outboxtest

import (
	"testing"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
)

const us = time.Microsecond

func eligibilityTests() []subtest {
	return []subtest{
		{"DeliverAtBoundary", testDeliverAtBoundary},
		{"ClaimExpiryBoundary", testClaimExpiryBoundary},
		{"ParkedExcluded", testParkedExcluded},
		{"CountSpansLanes", testCountSpansLanes},
	}
}

// A row due exactly at now is eligible; one due a microsecond later is not: for Read,
// Count and Claim, unordered and in a lane.
func testDeliverAtBoundary(t *testing.T, h Harness) {
	e := newEnv(t, h)
	due := at(10 * time.Second)
	u := NewRecord(at(0))
	u.DeliverAt = due
	key := keysInLane(4, testLanes, 1)[0]
	l := laneRecord(key, at(0))
	l.DeliverAt = due
	e.insert(u, l)
	before := due.Add(-us)
	sameIDs(t, "unordered Read a microsecond before", e.readIDs(outbox.Unordered, before), nil)
	sameIDs(t, "lane Read a microsecond before", e.readIDs(4, before), nil)
	if n := e.count(before); n != 0 {
		t.Fatalf("Count a microsecond before = %d, want 0", n)
	}
	lease := e.acquire(4)
	if _, got := e.claimUnordered(10, before, due.Add(time.Minute)); len(got) != 0 {
		t.Fatalf("unordered Claim a microsecond before took %s", idList(ids(got)))
	}
	if _, got := e.claimLane(4, 10, lease, before, due.Add(time.Minute)); len(got) != 0 {
		t.Fatalf("lane Claim a microsecond before took %s", idList(ids(got)))
	}
	sameIDs(t, "unordered Read at DeliverAt", e.readIDs(outbox.Unordered, due), idsOf(u))
	sameIDs(t, "lane Read at DeliverAt", e.readIDs(4, due), idsOf(l))
	if n := e.count(due); n != 2 {
		t.Fatalf("Count at DeliverAt = %d, want 2", n)
	}
	_, got := e.claimUnordered(10, due, due.Add(time.Minute))
	sameIDs(t, "unordered Claim at DeliverAt", ids(got), idsOf(u))
	_, got = e.claimLane(4, 10, lease, due, due.Add(time.Minute))
	sameIDs(t, "lane Claim at DeliverAt", ids(got), idsOf(l))
}

// A live claim hides a row; a claim whose expiry is exactly now has expired.
func testClaimExpiryBoundary(t *testing.T, h Harness) {
	e := newEnv(t, h)
	u := NewRecord(at(0))
	e.insert(u)
	until := at(30 * time.Second)
	first, got := e.claimUnordered(10, at(0), until)
	sameIDs(t, "first claim", ids(got), idsOf(u))
	before := until.Add(-us)
	sameIDs(t, "Read a microsecond before expiry", e.readIDs(outbox.Unordered, before), nil)
	if n := e.count(before); n != 0 {
		t.Fatalf("Count a microsecond before expiry = %d, want 0", n)
	}
	if _, got := e.claimUnordered(10, before, until.Add(time.Minute)); len(got) != 0 {
		t.Fatalf("a live claim was claimed again: %s", idList(ids(got)))
	}
	sameIDs(t, "Read at expiry", e.readIDs(outbox.Unordered, until), idsOf(u))
	if n := e.count(until); n != 1 {
		t.Fatalf("Count at expiry = %d, want 1", n)
	}
	second, got := e.claimUnordered(10, until, until.Add(time.Minute))
	sameIDs(t, "claim at expiry", ids(got), idsOf(u))
	if got[0].ClaimToken != second || second == first {
		t.Fatalf("claim at expiry: token %s, want the new token %s", got[0].ClaimToken, second)
	}
	// The first claimer's token is stale now.
	n, err := e.store.Complete(e.ctx, outbox.CompleteParams{Lane: outbox.Unordered, Token: first, IDs: idsOf(u), Now: until})
	wantN(t, "Complete with the replaced token", n, err, 0)
}

// Parked rows are never read, counted or claimed.
func testParkedExcluded(t *testing.T, h Harness) {
	e := newEnv(t, h)
	key := keysInLane(6, testLanes, 1)[0]
	u, p, l := NewRecord(at(0)), NewRecord(at(0)), laneRecord(key, at(0))
	e.insert(p, u, l)
	e.park(p.ID, "poison", at(0))
	e.park(l.ID, "poison", at(0))
	sameIDs(t, "Read", e.readIDs(outbox.Unordered, far), idsOf(u))
	sameIDs(t, "lane Read", e.readIDs(6, far), nil)
	if n := e.count(far); n != 1 {
		t.Fatalf("Count = %d, want 1", n)
	}
	lease := e.acquire(6)
	if _, got := e.claimLane(6, 10, lease, far, far.Add(time.Minute)); len(got) != 0 {
		t.Fatalf("lane Claim took parked rows %s", idList(ids(got)))
	}
	_, got := e.claimUnordered(10, far, far.Add(time.Minute))
	sameIDs(t, "Claim", ids(got), idsOf(u))
}

// Count covers unordered rows and every lane under the same eligibility rules.
func testCountSpansLanes(t *testing.T, h Harness) {
	e := newEnv(t, h)
	var recs []outbox.Record
	for lane := 0; lane < testLanes; lane++ {
		for _, k := range keysInLane(lane, testLanes, 2) {
			recs = append(recs, laneRecord(k, at(0)))
		}
	}
	recs = append(recs, NewRecord(at(0)), NewRecord(at(0)), NewRecord(at(0)))
	notDue := NewRecord(at(0))
	notDue.DeliverAt = at(time.Hour)
	laneNotDue := laneRecord("late", at(0))
	laneNotDue.DeliverAt = at(time.Hour)
	parked := laneRecord("parked", at(0))
	e.insert(append(recs, notDue, laneNotDue, parked)...)
	e.park(parked.ID, "poison", at(0))
	if n := e.count(at(0)); n != int64(len(recs)) {
		t.Fatalf("Count = %d, want %d", n, len(recs))
	}
	// Two unordered rows claimed (live) drop out; the lane rows stay counted.
	_, got := e.claimUnordered(2, at(0), at(time.Minute))
	if len(got) != 2 {
		t.Fatalf("Claim = %d rows, want 2", len(got))
	}
	if n := e.count(at(0)); n != int64(len(recs)-2) {
		t.Fatalf("Count with 2 live claims = %d, want %d", n, len(recs)-2)
	}
	if n := e.count(at(time.Hour)); n != int64(len(recs)+2) {
		t.Fatalf("Count after the claims expired and the late rows fell due = %d, want %d", n, len(recs)+2)
	}
}
