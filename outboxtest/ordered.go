package outboxtest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
)

func orderedTests() []subtest {
	return []subtest{
		{"HeadRunOnly", testHeadRun},
		{"NotDueHeadHoldsLane", testNotDueHead},
		{"ClaimedHeadHoldsLane", testClaimedHead},
		{"ParkedRowDoesNotHoldLane", testParkedDoesNotHold},
		{"HoldParkedKeys", testHoldParkedKeys},
		{"LeaseRequired", testClaimLeaseRequired},
		{"LockedHeadNotSkipped", testLockedHead},
		{"ConcurrentClaimsOneRunInFlight", testLaneClaimRace},
	}
}

// laneRows inserts n rows of lane (alternating between two of its keys) and returns them.
func (e *env) laneRows(lane, n int) []outbox.Record {
	e.t.Helper()
	keys := keysInLane(lane, testLanes, 2)
	recs := make([]outbox.Record, n)
	for i := range recs {
		recs[i] = laneRecord(keys[i%2], at(0))
	}
	e.insert(recs...)
	return recs
}

// A lane claim takes the leading run of eligible rows, in ID order, up to Limit, and
// stops at the first row that is not due.
func testHeadRun(t *testing.T, h Harness) {
	e := newEnv(t, h)
	keys := keysInLane(2, testLanes, 2)
	var recs []outbox.Record
	for i := 0; i < 6; i++ {
		recs = append(recs, laneRecord(keys[i%2], at(0)))
	}
	recs[4].DeliverAt = at(time.Minute) // not due: ends the run
	other := laneRecord(keysInLane(3, testLanes, 1)[0], at(0))
	e.insert(append(recs, other, NewRecord(at(0)))...)
	lease := e.acquire(2)
	tok, got := e.claimLane(2, 2, lease, at(0), at(time.Minute))
	sameIDs(t, "claim limit 2", ids(got), idsOf(recs[:2]...))
	for _, r := range got {
		if r.ClaimToken != tok || !r.ClaimExpiresAt.Equal(at(time.Minute)) {
			t.Errorf("row %s: claim %s until %s, want %s until %s", r.ID, r.ClaimToken, fmtTime(r.ClaimExpiresAt), tok, fmtTime(at(time.Minute)))
		}
	}
	// Complete the first two; the next run is rows 2 and 3 (row 4 is not due).
	n, err := e.store.Complete(e.ctx, outbox.CompleteParams{Token: tok, IDs: ids(got), Now: at(time.Second), Lane: 2, Lease: lease})
	wantN(t, "Complete", n, err, 2)
	_, got = e.claimLane(2, 10, lease, at(time.Second), at(time.Minute))
	sameIDs(t, "claim up to the row not due", ids(got), idsOf(recs[2:4]...))
}

// A head row that is not yet due holds the whole lane, even when later rows are due.
func testNotDueHead(t *testing.T, h Harness) {
	e := newEnv(t, h)
	keys := keysInLane(5, testLanes, 2)
	head, next := laneRecord(keys[0], at(0)), laneRecord(keys[1], at(0))
	head.DeliverAt = at(time.Minute)
	e.insert(head, next)
	lease := e.acquire(5)
	if _, got := e.claimLane(5, 10, lease, at(0), at(time.Hour)); len(got) != 0 {
		t.Fatalf("claim took %s past a head that is not due", idList(ids(got)))
	}
	_, got := e.claimLane(5, 10, lease, at(time.Minute), at(time.Hour))
	sameIDs(t, "claim once the head is due", ids(got), idsOf(head, next))
}

// A head row under another live claim holds the lane until the claim ends.
func testClaimedHead(t *testing.T, h Harness) {
	e := newEnv(t, h)
	recs := e.laneRows(1, 3)
	lease := e.acquire(1)
	tok, got := e.claimLane(1, 1, lease, at(0), at(time.Minute))
	sameIDs(t, "first claim", ids(got), idsOf(recs[0]))
	if _, got := e.claimLane(1, 10, lease, at(time.Second), at(time.Hour)); len(got) != 0 {
		t.Fatalf("claim took %s behind a claimed head", idList(ids(got)))
	}
	// Expired: the head is claimable again, with the rows behind it.
	_, got = e.claimLane(1, 10, lease, at(time.Minute), at(time.Hour))
	sameIDs(t, "claim after the head's claim expired", ids(got), ids(recs))
	// The released first token is stale.
	ok, err := e.store.Fail(e.ctx, outbox.FailParams{ID: recs[0].ID, Token: tok, Now: at(time.Minute), Error: "late", Lane: 1, Lease: lease})
	wantBool(t, "Fail with the expired token", ok, err, false)
}

// Parked rows are not pending: they neither hold the lane nor get claimed.
func testParkedDoesNotHold(t *testing.T, h Harness) {
	e := newEnv(t, h)
	recs := e.laneRows(7, 4)
	e.park(recs[0].ID, "poison", at(0))
	e.park(recs[2].ID, "poison", at(0))
	lease := e.acquire(7)
	_, got := e.claimLane(7, 10, lease, at(0), at(time.Minute))
	sameIDs(t, "claim around parked rows", ids(got), idsOf(recs[1], recs[3]))
}

// With HoldParkedKeys a row whose key has an earlier parked row in the lane is held: not
// claimed, and not holding the lane, so other keys flow on. Later parked rows do not
// hold earlier rows of their key.
func testHoldParkedKeys(t *testing.T, h Harness) {
	e := newEnv(t, h)
	keys := keysInLane(3, testLanes, 3)
	a, b, c := keys[0], keys[1], keys[2]
	p0 := laneRecord(a, at(0))
	r1 := laneRecord(a, at(0))
	r2 := laneRecord(b, at(0))
	r3 := laneRecord(a, at(0))
	r4 := laneRecord(c, at(0))
	r5 := laneRecord(b, at(0))
	p6 := laneRecord(b, at(0))
	r7 := laneRecord(c, at(0))
	r7.DeliverAt = at(time.Minute)
	r8 := laneRecord(c, at(0))
	e.insert(p0, r1, r2, r3, r4, r5, p6, r7, r8)
	e.park(p0.ID, "poison", at(0))
	e.park(p6.ID, "poison", at(0))
	lease := e.acquire(3)
	claim := func(hold bool) []outbox.ID {
		t.Helper()
		got := e.claim(outbox.ClaimParams{Lane: 3, Limit: 10, Now: at(0), Until: at(time.Second), Token: outbox.NewToken(), Lease: lease, HoldParkedKeys: hold})
		return ids(got)
	}
	// Key a is held behind p0; b's rows precede p6; r7 (not due) ends the run.
	sameIDs(t, "HoldParkedKeys claim", claim(true), idsOf(r2, r4, r5))
	// Without it the parked rows are simply skipped. (The claims above expired at 1s.)
	e2 := at(time.Second)
	got := e.claim(outbox.ClaimParams{Lane: 3, Limit: 10, Now: e2, Until: at(2 * time.Second), Token: outbox.NewToken(), Lease: lease})
	sameIDs(t, "claim without HoldParkedKeys", ids(got), idsOf(r1, r2, r3, r4, r5))
}

// A lane claim needs the live lease of that lane: none, a wrong one, another lane's, or
// one that expired exactly at now claims nothing, without error.
func testClaimLeaseRequired(t *testing.T, h Harness) {
	e := newEnv(t, h)
	recs := e.laneRows(4, 2)
	expired := e.acquireTTL(4, shortTTL)
	e.waitExpired(4, expired)
	otherLane := e.acquire(5)
	for _, c := range []struct {
		name  string
		lease outbox.Token
		now   time.Time
	}{
		{"no lease", outbox.Token{}, at(0)},
		{"unknown lease", outbox.NewToken(), at(0)},
		{"another lane's lease", otherLane, at(0)},
		{"expired lease", expired, at(0)},
	} {
		got, err := e.store.Claim(e.ctx, outbox.ClaimParams{Lane: 4, Limit: 10, Now: c.now, Until: c.now.Add(time.Minute), Token: outbox.NewToken(), Lease: c.lease}, nil)
		if err != nil || len(got) != 0 {
			t.Errorf("%s: Claim = %s, %v; want no rows, nil", c.name, idList(ids(got)), err)
		}
	}
	lease := e.acquire(4)
	_, got := e.claimLane(4, 10, lease, at(0), at(time.Minute))
	sameIDs(t, "claim under the live lease", ids(got), ids(recs))
}

// A lane claim never skips a locked head row to take the rows behind it (that would
// send them first): it returns nothing, or waits and returns the run from the head.
func testLockedHead(t *testing.T, h Harness) {
	e := newEnv(t, h)
	recs := e.laneRows(2, 3)
	lease := e.acquire(2)
	release := e.lockRow(recs[0])
	go func() {
		time.Sleep(2 * time.Second)
		release()
	}()
	ctx, cancel := context.WithTimeout(e.ctx, 20*time.Second)
	defer cancel()
	got, err := e.store.Claim(ctx, outbox.ClaimParams{Lane: 2, Limit: 10, Now: at(0), Until: at(time.Minute), Token: outbox.NewToken(), Lease: lease}, nil)
	if err != nil {
		t.Fatalf("lane Claim with a locked head: %v", err)
	}
	if len(got) > 0 {
		sameIDs(t, "lane claim that waited for the locked head", ids(got), ids(recs))
		return
	}
	release()
	_, got = e.claimLane(2, 10, lease, at(0), at(time.Minute))
	sameIDs(t, "lane claim after the head's lock is released", ids(got), ids(recs))
}

// Claimers racing on one lane (with its live lease) never hold two runs at once: a
// claim taken while another is live returns nothing, so when a claim returns, every
// row before it has been completed.
func testLaneClaimRace(t *testing.T, h Harness) {
	e := newEnv(t, h)
	const rows, claimers, batch = 300, 4, 7
	keys := keysInLane(1, testLanes, 3)
	recs := make([]outbox.Record, rows)
	for i := range recs {
		recs[i] = laneRecord(keys[i%3], at(0))
	}
	e.insert(recs...)
	lease := e.acquire(1)
	earlier := "SELECT COUNT(*) FROM " + e.outboxTable() + " WHERE lane = " + h.Placeholder(1) + " AND id < " + h.Placeholder(2)
	var (
		mu       sync.Mutex
		claimed  = map[outbox.ID]bool{}
		problems []string
		wg       sync.WaitGroup
	)
	report := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(problems) < 5 {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	for c := 0; c < claimers; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			deadline := time.Now().Add(30 * time.Second)
			for time.Now().Before(deadline) {
				tok := outbox.NewToken()
				got, err := e.store.Claim(e.ctx, outbox.ClaimParams{Lane: 1, Limit: batch, Now: at(time.Second), Until: far, Token: tok, Lease: lease}, nil)
				if outbox.IsRetryable(err) {
					continue
				}
				if err != nil {
					report("Claim: %v", err)
					return
				}
				if len(got) == 0 {
					mu.Lock()
					done := len(claimed) == rows
					mu.Unlock()
					if done {
						return
					}
					time.Sleep(200 * time.Microsecond)
					continue
				}
				first := got[0].ID
				var before int64
				if err := e.h.DB.QueryRowContext(e.ctx, earlier, 1, first[:]).Scan(&before); err != nil {
					report("count earlier rows: %v", err)
					return
				}
				if before != 0 {
					report("a claim returned %d rows from %s while %d earlier rows of the lane were not completed", len(got), first, before)
				}
				mu.Lock()
				for _, r := range got {
					if claimed[r.ID] {
						problems = append(problems, fmt.Sprintf("row %s claimed twice", r.ID))
					}
					claimed[r.ID] = true
				}
				mu.Unlock()
				for {
					n, err := e.store.Complete(e.ctx, outbox.CompleteParams{Token: tok, IDs: ids(got), Now: at(time.Second), Lane: 1, Lease: lease})
					if outbox.IsRetryable(err) {
						continue
					}
					if err != nil || n != len(got) {
						report("Complete = %d, %v; want %d", n, err, len(got))
						return
					}
					break
				}
			}
			report("claimer gave up after 30s")
		}()
	}
	wg.Wait()
	for _, p := range problems {
		t.Error(p)
	}
	if len(claimed) != rows {
		t.Fatalf("%d rows claimed, want %d", len(claimed), rows)
	}
}
