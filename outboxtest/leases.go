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
	lease := e.acquire(2)
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
// unordered and parked rows do not count, nor lanes at or above the store's Lanes.
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
	lease := e.acquire(0)
	if _, got := e.claimLane(0, 1, lease, at(0), at(time.Minute)); len(got) != 1 {
		t.Fatalf("claim of lane 0 = %d rows, want 1", len(got))
	}
	check("with lane 0's row claimed", 0, 5, testLanes-1)
	e.park(late.ID, "p", at(0))
	check("with lane 5's row parked", 0, testLanes-1)

	// A store with fewer lanes over the same table (rows written with more lanes) lists
	// only its own lanes; MaxLane is what reports the others.
	o := e.opts
	o.Lanes = testLanes - 1
	narrow, err := e.h.NewStore(e.h.DB, o)
	if err != nil {
		t.Fatalf("NewStore with %d lanes: %v", testLanes-1, err)
	}
	if got, err := narrow.PendingLanes(e.ctx); err != nil || !slices.Equal(got, []int{0}) {
		t.Fatalf("PendingLanes of a store with %d lanes over rows in lanes 0 and %d = %v, %v; want [0] (lane %d is out of its range)",
			testLanes-1, testLanes-1, got, err, testLanes-1)
	}
}

func (e *env) leases() []outbox.Lease {
	e.t.Helper()
	ls, err := e.store.Leases(e.ctx)
	if err != nil {
		e.t.Fatalf("Leases: %v", err)
	}
	return ls
}

// wantLease checks that lane's lease row is held by owner with tok, with the given
// liveness, and returns it.
func (e *env) wantLease(what string, lane int, owner string, tok outbox.Token, live bool) outbox.Lease {
	e.t.Helper()
	for _, l := range e.leases() {
		if l.Lane != lane {
			continue
		}
		if l.Owner != owner || l.Token != tok || l.Live != live {
			e.t.Fatalf("%s: lane %d held by %q with %s (live %v), want %q with %s (live %v)", what, lane, l.Owner, l.Token, l.Live, owner, tok, live)
		}
		return l
	}
	e.t.Fatalf("%s: no lease row for lane %d", what, lane)
	return outbox.Lease{}
}

func lp(lane int, owner string, tok outbox.Token, ttl time.Duration) outbox.LeaseParams {
	return outbox.LeaseParams{Lane: lane, Owner: owner, Token: tok, TTL: ttl}
}

// Acquire a free lane, refuse a held one, extend with the same token, renew only with
// the current token and never shorter; an expired lease is not renewed and is taken
// over with a new token. Expiries are set and compared on the database's clock: the TTL
// counts from the database's now.
func testLeaseLifecycle(t *testing.T, h Harness) {
	e := newEnv(t, h)
	tA, tB := outbox.NewToken(), outbox.NewToken()
	before := time.Now()
	ok, err := e.store.AcquireLease(e.ctx, lp(1, "node-a", tA, time.Hour))
	wantBool(t, "AcquireLease of a free lane", ok, err, true)
	l := e.wantLease("after acquire", 1, "node-a", tA, true)
	// The expiry is an hour after the database's now, which is close to this clock here
	// (a unit mistake, seconds for microseconds, is far off).
	if d := l.ExpiresAt.Sub(before.Add(time.Hour)); d < -5*time.Minute || d > 5*time.Minute {
		t.Fatalf("ExpiresAt %s, want about an hour after %s", fmtTime(l.ExpiresAt), fmtTime(before))
	}

	ok, err = e.store.AcquireLease(e.ctx, lp(1, "node-b", tB, time.Hour))
	wantBool(t, "AcquireLease of a held lane", ok, err, false)
	e.wantLease("after a refused acquire", 1, "node-a", tA, true)

	ok, err = e.store.AcquireLease(e.ctx, lp(1, "node-a", tA, 2*time.Hour))
	wantBool(t, "AcquireLease with the holder's token", ok, err, true)
	l2 := e.wantLease("after re-acquire", 1, "node-a", tA, true)
	if !l2.ExpiresAt.After(l.ExpiresAt.Add(30 * time.Minute)) {
		t.Fatalf("re-acquire for 2h: ExpiresAt %s, want an hour past %s", fmtTime(l2.ExpiresAt), fmtTime(l.ExpiresAt))
	}

	ok, err = e.store.RenewLease(e.ctx, lp(1, "node-a", tA, 3*time.Hour))
	wantBool(t, "RenewLease", ok, err, true)
	l3 := e.wantLease("after renew", 1, "node-a", tA, true)
	if !l3.ExpiresAt.After(l2.ExpiresAt.Add(30 * time.Minute)) {
		t.Fatalf("renew for 3h: ExpiresAt %s, want an hour past %s", fmtTime(l3.ExpiresAt), fmtTime(l2.ExpiresAt))
	}
	ok, err = e.store.RenewLease(e.ctx, lp(1, "node-a", tA, time.Minute))
	wantBool(t, "RenewLease to an earlier expiry", ok, err, true)
	if l4 := e.wantLease("after a shortening renew", 1, "node-a", tA, true); !l4.ExpiresAt.Equal(l3.ExpiresAt) {
		t.Fatalf("a shorter renew moved ExpiresAt from %s to %s", fmtTime(l3.ExpiresAt), fmtTime(l4.ExpiresAt))
	}
	ok, err = e.store.RenewLease(e.ctx, lp(1, "node-b", tB, time.Hour))
	wantBool(t, "RenewLease with another token", ok, err, false)
	ok, err = e.store.RenewLease(e.ctx, lp(2, "node-a", tA, time.Hour))
	wantBool(t, "RenewLease of a lane never leased", ok, err, false)

	// Lane 3 expires: it is not renewed any more, and node-b takes it over.
	ok, err = e.store.AcquireLease(e.ctx, lp(3, "node-a", tA, shortTTL))
	wantBool(t, "AcquireLease for a short TTL", ok, err, true)
	e.waitExpired(3, tA)
	e.wantLease("after expiry", 3, "node-a", tA, false)
	ok, err = e.store.RenewLease(e.ctx, lp(3, "node-a", tA, time.Hour))
	wantBool(t, "RenewLease of an expired lease", ok, err, false)
	ok, err = e.store.AcquireLease(e.ctx, lp(3, "node-b", tB, time.Hour))
	wantBool(t, "AcquireLease of an expired lease", ok, err, true)
	e.wantLease("after takeover", 3, "node-b", tB, true)
	ok, err = e.store.RenewLease(e.ctx, lp(3, "node-a", tA, time.Hour))
	wantBool(t, "RenewLease with the replaced token", ok, err, false)
	ok, err = e.store.AcquireLease(e.ctx, lp(3, "node-a", tA, time.Hour))
	wantBool(t, "AcquireLease with the replaced token", ok, err, false)
	ok, err = e.store.ReleaseLease(e.ctx, 3, tA)
	wantBool(t, "ReleaseLease with the replaced token", ok, err, false)
	e.wantLease("after stale renew and release", 3, "node-b", tB, true)
}

// Release gives up a lease (live or expired) only with its token; the lane is free at once.
func testLeaseRelease(t *testing.T, h Harness) {
	e := newEnv(t, h)
	tA := e.acquire(3)
	ok, err := e.store.ReleaseLease(e.ctx, 3, outbox.NewToken())
	wantBool(t, "ReleaseLease with a wrong token", ok, err, false)
	e.wantLease("after a refused release", 3, "outboxtest", tA, true)
	ok, err = e.store.ReleaseLease(e.ctx, 3, tA)
	wantBool(t, "ReleaseLease", ok, err, true)
	tB := outbox.NewToken()
	ok, err = e.store.AcquireLease(e.ctx, lp(3, "node-b", tB, time.Minute))
	wantBool(t, "AcquireLease right after release", ok, err, true)
	ok, err = e.store.RenewLease(e.ctx, lp(3, "node-a", tA, 2*time.Hour))
	wantBool(t, "RenewLease with the released token", ok, err, false)
	// Releasing an expired lease with its token works too.
	tC := e.acquireTTL(4, shortTTL)
	e.waitExpired(4, tC)
	ok, err = e.store.ReleaseLease(e.ctx, 4, tC)
	wantBool(t, "ReleaseLease of an expired lease", ok, err, true)
	ok, err = e.store.ReleaseLease(e.ctx, 4, tC)
	wantBool(t, "second ReleaseLease", ok, err, false)
}

// Leases lists every lease row, live or expired (Live on the database's clock), ordered
// by lane.
func testLeaseList(t *testing.T, h Harness) {
	e := newEnv(t, h)
	if ls := e.leases(); len(ls) != 0 {
		t.Fatalf("Leases of a fresh table = %+v", ls)
	}
	t5 := e.acquireTTL(5, shortTTL)
	e.waitExpired(5, t5)
	t0 := e.acquire(0)
	t3 := e.acquire(3)
	ls := e.leases()
	want := []outbox.Lease{
		{Lane: 0, Owner: "outboxtest", Token: t0, Live: true},
		{Lane: 3, Owner: "outboxtest", Token: t3, Live: true},
		{Lane: 5, Owner: "outboxtest", Token: t5, Live: false},
	}
	if len(ls) != len(want) {
		t.Fatalf("Leases = %+v, want %+v", ls, want)
	}
	for i := range want {
		if ls[i].Lane != want[i].Lane || ls[i].Owner != want[i].Owner || ls[i].Token != want[i].Token || ls[i].Live != want[i].Live {
			t.Errorf("lease %d = %+v, want %+v", i, ls[i], want[i])
		}
		if ls[i].ExpiresAt.Location() != time.UTC {
			t.Errorf("lease of lane %d: ExpiresAt not in UTC", ls[i].Lane)
		}
	}
	if !ls[2].ExpiresAt.Before(ls[0].ExpiresAt) {
		t.Errorf("expired lease's ExpiresAt %s not before a live one's %s", fmtTime(ls[2].ExpiresAt), fmtTime(ls[0].ExpiresAt))
	}
}

// Heartbeats make members live for their TTL on the database's clock; a repeated
// heartbeat moves the expiry; Leave removes a member.
func testMembers(t *testing.T, h Harness) {
	e := newEnv(t, h)
	members := func(want ...string) {
		t.Helper()
		got, err := e.store.Members(e.ctx)
		if err != nil {
			t.Fatalf("Members: %v", err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("Members = %q, want %q", got, want)
		}
	}
	beat := func(owner string, ttl time.Duration) {
		t.Helper()
		if err := e.store.Heartbeat(e.ctx, owner, ttl); err != nil {
			t.Fatalf("Heartbeat(%s): %v", owner, err)
		}
	}
	members()
	beat("node-b", shortTTL)
	beat("node-a", time.Hour)
	members("node-a", "node-b")
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := e.store.Members(e.ctx)
		if err != nil {
			t.Fatalf("Members: %v", err)
		}
		if slices.Equal(got, []string{"node-a"}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Members = %q 10 s after node-b's heartbeat of %s, want node-a only", got, shortTTL)
		}
		time.Sleep(20 * time.Millisecond)
	}
	beat("node-b", time.Hour)
	members("node-a", "node-b")
	if err := e.store.Leave(e.ctx, "node-a"); err != nil {
		t.Fatalf("Leave: %v", err)
	}
	members("node-b")
	if err := e.store.Leave(e.ctx, "node-unknown"); err != nil {
		t.Fatalf("Leave of an unknown owner: %v", err)
	}
	members("node-b")
}

// Forwarders racing for a free lane, and then for its expired lease, get exactly one
// winner each time (transient errors count as losing).
func testLeaseAcquireRace(t *testing.T, h Harness) {
	e := newEnv(t, h)
	const racers = 8
	// Each winner holds for raceTTL: long enough that it does not expire during its own
	// race on a loaded machine.
	const raceTTL = 3 * time.Second
	race := func(round int) outbox.Token {
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
				ok, err := e.store.AcquireLease(e.ctx, lp(2, fmt.Sprintf("node-%d-%d", round, i), tok, raceTTL))
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
	// Round 0 races for a free lane, round 1 for the expired lease of round 0.
	for round := 0; round < 2; round++ {
		tok := race(round)
		ls := e.leases()
		if len(ls) != 1 || ls[0].Token != tok {
			t.Fatalf("round %d: Leases = %+v, want the winner's token %s", round, ls, tok)
		}
		if round == 0 {
			e.waitExpired(2, tok)
		}
	}
}
