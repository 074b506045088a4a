package outboxtest

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
)

func statsTests() []subtest {
	return []subtest{
		{"PerLane", testStats},
		{"MaxLane", testMaxLane},
		{"PendingLanes", testPendingLanes},
	}
}

func leaseTests() []subtest {
	return []subtest{
		{"AcquireRenewTakeover", testLeaseLifecycle},
		{"Release", testLeaseRelease},
		{"List", testLeaseList},
		{"AcquireRace", testLeaseAcquireRace},
	}
}

func memberTests() []subtest {
	return []subtest{
		{"HeartbeatMembersLeave", testMembers},
	}
}

// Stats gives each lane's eligible count and oldest eligible DeliverAt (Unordered first,
// by lane) and the parked count. A lane whose pending rows are all ineligible may be
// listed with zero or left out.
func testStats(t *testing.T, h Harness) {
	e := newEnv(t, h)
	u1, u2, u3, u4, u5 := NewRecord(at(0)), NewRecord(at(0)), NewRecord(at(0)), NewRecord(at(0)), NewRecord(at(0))
	u1.ID, u2.ID = u2.ID, u1.ID            // u2 first by ID
	u1.DeliverAt = at(-time.Minute + 3*us) // oldest unordered, though not first by ID
	u3.DeliverAt = at(time.Hour)           // not due
	k2, k5 := keysInLane(2, testLanes, 1)[0], keysInLane(5, testLanes, 1)[0]
	x1, x2 := laneRecord(k2, at(-10*time.Second)), laneRecord(k2, at(-9*time.Second+us))
	y1, y2 := laneRecord(k5, at(0)), laneRecord(k5, at(0))
	y2.DeliverAt = at(time.Hour)
	e.insert(u2, u1, u3, u4, u5, x1, x2, y1, y2)
	// u2 becomes claimed (the claim takes the lowest ID first), x1 too; u5 and y1 parked.
	_, got := e.claimUnordered(1, at(0), at(time.Hour))
	sameIDs(t, "setup claim", ids(got), idsOf(u2))
	lease := e.acquire(2, at(0), far)
	_, got = e.claimLane(2, 1, lease, at(0), at(time.Hour))
	sameIDs(t, "setup lane claim", ids(got), idsOf(x1))
	e.park(u5.ID, "p", at(0))
	e.park(y1.ID, "p", at(0))

	st, err := e.store.Stats(e.ctx, at(0))
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	want := []outbox.LaneStats{
		{Lane: outbox.Unordered, Eligible: 2, OldestEligible: u1.DeliverAt},
		{Lane: 2, Eligible: 1, OldestEligible: x2.CreatedAt},
	}
	var nonEmpty []outbox.LaneStats
	for i, ls := range st.Lanes {
		if i > 0 && ls.Lane <= st.Lanes[i-1].Lane {
			t.Errorf("Stats lanes not ordered by lane: %+v", st.Lanes)
		}
		if ls.Eligible == 0 {
			if !ls.OldestEligible.IsZero() {
				t.Errorf("lane %d: no eligible row but oldest %s", ls.Lane, fmtTime(ls.OldestEligible))
			}
			continue
		}
		nonEmpty = append(nonEmpty, ls)
	}
	if len(nonEmpty) != len(want) {
		t.Fatalf("Stats lanes = %+v, want %+v", st.Lanes, want)
	}
	for i := range want {
		g, w := nonEmpty[i], want[i]
		if g.Lane != w.Lane || g.Eligible != w.Eligible {
			t.Errorf("lane stats %+v, want %+v", g, w)
		}
		for _, d := range diffTime("OldestEligible", g.OldestEligible, w.OldestEligible) {
			t.Errorf("lane %d: %s", w.Lane, d)
		}
	}
	if st.Parked != 2 {
		t.Errorf("Stats.Parked = %d, want 2", st.Parked)
	}
	var sum int64
	for _, ls := range st.Lanes {
		sum += ls.Eligible
	}
	if n := e.count(at(0)); n != sum {
		t.Errorf("Count = %d but Stats lanes add up to %d", n, sum)
	}
	empty := newEnv(t, h)
	st, err = empty.store.Stats(empty.ctx, at(0))
	if err != nil || len(st.Lanes) != 0 || st.Parked != 0 {
		t.Fatalf("Stats of an empty table = %+v, %v", st, err)
	}
}

// MaxLane is the greatest lane present, pending or parked, or Unordered when none.
func testMaxLane(t *testing.T, h Harness) {
	e := newEnv(t, h)
	check := func(what string, want int) {
		t.Helper()
		got, err := e.store.MaxLane(e.ctx)
		if err != nil || got != want {
			t.Fatalf("MaxLane %s = %d, %v; want %d", what, got, err, want)
		}
	}
	check("of an empty table", outbox.Unordered)
	e.insert(NewRecord(at(0)))
	check("with unordered rows only", outbox.Unordered)
	e.insert(laneRecord(keysInLane(3, testLanes, 1)[0], at(0)), laneRecord(keysInLane(1, testLanes, 1)[0], at(0)))
	check("with lanes 1 and 3", 3)
	r := laneRecord(keysInLane(testLanes-1, testLanes, 1)[0], at(0))
	e.insert(r)
	e.park(r.ID, "p", at(0))
	check("with a parked row in the last lane", testLanes-1)
}

// PendingLanes lists, ascending, the lanes with pending rows, due or not, claimed or not;
// unordered and parked rows do not count.
func testPendingLanes(t *testing.T, h Harness) {
	e := newEnv(t, h)
	check := func(what string, want ...int) {
		t.Helper()
		got, err := e.store.PendingLanes(e.ctx)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("PendingLanes %s = %v, %v; want %v", what, got, err, want)
		}
	}
	check("of an empty table")
	e.insert(NewRecord(at(0)))
	check("with unordered rows only")
	late := laneRecord(keysInLane(5, testLanes, 1)[0], at(0))
	late.DeliverAt = at(time.Hour)
	e.insert(laneRecord(keysInLane(testLanes-1, testLanes, 1)[0], at(0)), late, laneRecord(keysInLane(0, testLanes, 1)[0], at(0)))
	check("with lanes 0, 5 (not due) and the last", 0, 5, testLanes-1)
	lease := e.acquire(0, at(0), at(time.Hour))
	if _, got := e.claimLane(0, 1, lease, at(0), at(time.Minute)); len(got) != 1 {
		t.Fatalf("claim of lane 0 = %d rows, want 1", len(got))
	}
	check("with lane 0's row claimed", 0, 5, testLanes-1)
	e.park(late.ID, "p", at(0))
	check("with lane 5's row parked", 0, testLanes-1)
}

func (e *env) leases() []outbox.Lease {
	e.t.Helper()
	ls, err := e.store.Leases(e.ctx)
	if err != nil {
		e.t.Fatalf("Leases: %v", err)
	}
	return ls
}

// wantLease checks that lane's lease row is held by owner with tok until until.
func (e *env) wantLease(what string, lane int, owner string, tok outbox.Token, until time.Time) {
	e.t.Helper()
	for _, l := range e.leases() {
		if l.Lane != lane {
			continue
		}
		if l.Owner != owner || l.Token != tok {
			e.t.Fatalf("%s: lane %d held by %q with %s, want %q with %s", what, lane, l.Owner, l.Token, owner, tok)
		}
		for _, d := range diffTime("ExpiresAt", l.ExpiresAt, until) {
			e.t.Fatalf("%s: lane %d: %s", what, lane, d)
		}
		return
	}
	e.t.Fatalf("%s: no lease row for lane %d", what, lane)
}

func lp(lane int, owner string, tok outbox.Token, now, until time.Time) outbox.LeaseParams {
	return outbox.LeaseParams{Lane: lane, Owner: owner, Token: tok, Now: now, Until: until}
}

// Acquire a free lane, refuse a held one, extend with the same token, renew only with
// the current token and never shorter, take over an expired one with a new token.
func testLeaseLifecycle(t *testing.T, h Harness) {
	e := newEnv(t, h)
	tA, tB := outbox.NewToken(), outbox.NewToken()
	ok, err := e.store.AcquireLease(e.ctx, lp(1, "node-a", tA, at(0), at(10*time.Second)))
	wantBool(t, "AcquireLease of a free lane", ok, err, true)
	e.wantLease("after acquire", 1, "node-a", tA, at(10*time.Second))

	ok, err = e.store.AcquireLease(e.ctx, lp(1, "node-b", tB, at(10*time.Second-us), at(time.Minute)))
	wantBool(t, "AcquireLease of a held lane", ok, err, false)
	e.wantLease("after a refused acquire", 1, "node-a", tA, at(10*time.Second))

	ok, err = e.store.AcquireLease(e.ctx, lp(1, "node-a", tA, at(time.Second), at(15*time.Second)))
	wantBool(t, "AcquireLease with the holder's token", ok, err, true)
	e.wantLease("after re-acquire", 1, "node-a", tA, at(15*time.Second))

	ok, err = e.store.RenewLease(e.ctx, lp(1, "node-a", tA, at(2*time.Second), at(30*time.Second)))
	wantBool(t, "RenewLease", ok, err, true)
	e.wantLease("after renew", 1, "node-a", tA, at(30*time.Second))

	ok, err = e.store.RenewLease(e.ctx, lp(1, "node-a", tA, at(3*time.Second), at(20*time.Second)))
	wantBool(t, "RenewLease to an earlier expiry", ok, err, true)
	e.wantLease("after a shortening renew", 1, "node-a", tA, at(30*time.Second))

	ok, err = e.store.RenewLease(e.ctx, lp(1, "node-b", tB, at(3*time.Second), at(time.Hour)))
	wantBool(t, "RenewLease with another token", ok, err, false)
	ok, err = e.store.RenewLease(e.ctx, lp(2, "node-a", tA, at(3*time.Second), at(time.Hour)))
	wantBool(t, "RenewLease of a lane never leased", ok, err, false)

	// Expired exactly at now: node-b takes over with its own token.
	ok, err = e.store.AcquireLease(e.ctx, lp(1, "node-b", tB, at(30*time.Second), at(time.Minute)))
	wantBool(t, "AcquireLease of a lease expiring exactly at now", ok, err, true)
	e.wantLease("after takeover", 1, "node-b", tB, at(time.Minute))
	ok, err = e.store.RenewLease(e.ctx, lp(1, "node-a", tA, at(31*time.Second), at(time.Hour)))
	wantBool(t, "RenewLease with the replaced token", ok, err, false)
	ok, err = e.store.ReleaseLease(e.ctx, 1, tA)
	wantBool(t, "ReleaseLease with the replaced token", ok, err, false)
	e.wantLease("after stale renew and release", 1, "node-b", tB, at(time.Minute))

	ok, err = e.store.RenewLease(e.ctx, lp(1, "node-b", tB, at(time.Minute), at(time.Hour)))
	wantBool(t, "RenewLease of a lease expiring exactly at now", ok, err, false)
	e.wantLease("after renewing an expired lease", 1, "node-b", tB, at(time.Minute))
}

// Release gives up a lease (live or expired) only with its token; the lane is free at once.
func testLeaseRelease(t *testing.T, h Harness) {
	e := newEnv(t, h)
	tA := e.acquire(3, at(0), at(time.Hour))
	ok, err := e.store.ReleaseLease(e.ctx, 3, outbox.NewToken())
	wantBool(t, "ReleaseLease with a wrong token", ok, err, false)
	e.wantLease("after a refused release", 3, "outboxtest", tA, at(time.Hour))
	ok, err = e.store.ReleaseLease(e.ctx, 3, tA)
	wantBool(t, "ReleaseLease", ok, err, true)
	tB := outbox.NewToken()
	ok, err = e.store.AcquireLease(e.ctx, lp(3, "node-b", tB, at(time.Second), at(time.Minute)))
	wantBool(t, "AcquireLease right after release", ok, err, true)
	ok, err = e.store.RenewLease(e.ctx, lp(3, "node-a", tA, at(2*time.Second), at(2*time.Hour)))
	wantBool(t, "RenewLease with the released token", ok, err, false)
	// Releasing an expired lease with its token works too.
	tC := e.acquire(4, at(0), at(time.Second))
	ok, err = e.store.ReleaseLease(e.ctx, 4, tC)
	wantBool(t, "ReleaseLease of an expired lease", ok, err, true)
	ok, err = e.store.ReleaseLease(e.ctx, 4, tC)
	wantBool(t, "second ReleaseLease", ok, err, false)
}

// Leases lists every lease row, live or expired, ordered by lane.
func testLeaseList(t *testing.T, h Harness) {
	e := newEnv(t, h)
	if ls := e.leases(); len(ls) != 0 {
		t.Fatalf("Leases of a fresh table = %+v", ls)
	}
	t5 := e.acquire(5, at(0), at(time.Second))
	t0 := e.acquire(0, at(0), at(time.Hour))
	t3 := e.acquire(3, at(0), at(time.Minute+us))
	ls := e.leases()
	want := []outbox.Lease{
		{Lane: 0, Owner: "outboxtest", Token: t0, ExpiresAt: at(time.Hour)},
		{Lane: 3, Owner: "outboxtest", Token: t3, ExpiresAt: at(time.Minute + us)},
		{Lane: 5, Owner: "outboxtest", Token: t5, ExpiresAt: at(time.Second)},
	}
	if len(ls) != len(want) {
		t.Fatalf("Leases = %+v, want %+v", ls, want)
	}
	for i := range want {
		if ls[i].Lane != want[i].Lane || ls[i].Owner != want[i].Owner || ls[i].Token != want[i].Token {
			t.Errorf("lease %d = %+v, want %+v", i, ls[i], want[i])
		}
		for _, d := range diffTime("ExpiresAt", ls[i].ExpiresAt, want[i].ExpiresAt) {
			t.Errorf("lease of lane %d: %s", want[i].Lane, d)
		}
	}
}

// Heartbeats make members live until their expiry (exclusive); a repeated heartbeat
// moves the expiry; Leave removes a member.
func testMembers(t *testing.T, h Harness) {
	e := newEnv(t, h)
	members := func(now time.Time, want ...string) {
		t.Helper()
		got, err := e.store.Members(e.ctx, now)
		if err != nil {
			t.Fatalf("Members: %v", err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("Members(%s) = %q, want %q", fmtTime(now), got, want)
		}
	}
	beat := func(owner string, until time.Time) {
		t.Helper()
		if err := e.store.Heartbeat(e.ctx, owner, until); err != nil {
			t.Fatalf("Heartbeat(%s): %v", owner, err)
		}
	}
	members(at(0))
	beat("node-b", at(10*time.Second))
	beat("node-a", at(20*time.Second))
	members(at(0), "node-a", "node-b")
	members(at(10*time.Second-us), "node-a", "node-b")
	members(at(10*time.Second), "node-a")
	beat("node-b", at(30*time.Second))
	members(at(10*time.Second), "node-a", "node-b")
	members(at(20*time.Second), "node-b")
	if err := e.store.Leave(e.ctx, "node-a"); err != nil {
		t.Fatalf("Leave: %v", err)
	}
	members(at(0), "node-b")
	if err := e.store.Leave(e.ctx, "node-unknown"); err != nil {
		t.Fatalf("Leave of an unknown owner: %v", err)
	}
	members(at(0), "node-b")
}

// Forwarders racing for a free lane, and then for its expired lease, get exactly one
// winner each time (transient errors count as losing).
func testLeaseAcquireRace(t *testing.T, h Harness) {
	e := newEnv(t, h)
	const racers = 8
	race := func(round int, now, until time.Time) outbox.Token {
		t.Helper()
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			winners []outbox.Token
			errs    []error
		)
		start := make(chan struct{})
		for i := 0; i < racers; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				tok := outbox.NewToken()
				<-start
				ok, err := e.store.AcquireLease(e.ctx, lp(2, fmt.Sprintf("node-%d-%d", round, i), tok, now, until))
				mu.Lock()
				defer mu.Unlock()
				if err != nil && !outbox.IsRetryable(err) {
					errs = append(errs, err)
				}
				if ok && err == nil {
					winners = append(winners, tok)
				}
			}()
		}
		close(start)
		wg.Wait()
		for _, err := range errs {
			t.Errorf("round %d: AcquireLease: %v", round, err)
		}
		if len(winners) != 1 {
			t.Fatalf("round %d: %d racers acquired the lease, want exactly 1", round, len(winners))
		}
		return winners[0]
	}
	for round := 0; round < 5; round++ {
		now := at(time.Duration(round) * time.Minute)
		tok := race(round, now, now.Add(time.Minute))
		ls := e.leases()
		if len(ls) != 1 || ls[0].Token != tok {
			t.Fatalf("round %d: Leases = %+v, want the winner's token %s", round, ls, tok)
		}
	}
}
