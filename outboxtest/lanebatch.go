package outboxtest

import (
	"errors"
	"slices"
	"testing"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
)

// laneBatchTests cover the optional outbox.LaneBatcher capability; each skips when the
// dialect's store does not implement it.
func laneBatchTests() []subtest {
	return []subtest{
		{"HeadLanesIsHeadPerLane", testHeadLanesIsHead},
		{"HeadLanesWindow", testHeadLanesWindow},
		{"HeadLanesParkedKeys", testHeadLanesParked},
		{"CompleteLanesFencedPerLane", testCompleteLanes},
		{"InvalidArguments", testLaneBatchArguments},
	}
}

// batcher returns the store as an outbox.LaneBatcher, or skips the test.
func (e *env) batcher(t *testing.T) outbox.LaneBatcher {
	t.Helper()
	lb, ok := e.store.(outbox.LaneBatcher)
	if !ok {
		t.Skipf("%s store does not implement outbox.LaneBatcher", e.h.Name)
	}
	return lb
}

func (e *env) headLanes(lb outbox.LaneBatcher, q outbox.HeadLanesQuery) ([]outbox.Record, bool) {
	e.t.Helper()
	got, full, err := lb.HeadLanes(e.ctx, q, nil)
	if err != nil {
		e.t.Fatalf("HeadLanes(%+v): %v", q, err)
	}
	return got, full
}

// ofLane returns the records of recs in lane, in their order.
func ofLane(recs []outbox.Record, lane int) []outbox.Record {
	var out []outbox.Record
	for _, r := range recs {
		if r.Lane == lane {
			out = append(out, r)
		}
	}
	return out
}

// With a window over every pending lane row, HeadLanes returns for each listed lane what
// Head returns (a row not due holds its lane; LaneLimit caps each lane), whole, in ID
// order across the lanes, nothing of the lanes not listed nor unordered rows, and it
// writes nothing.
func testHeadLanesIsHead(t *testing.T, h Harness) {
	e := newEnv(t, h)
	lb := e.batcher(t)
	var recs []outbox.Record
	for i := range 24 {
		lane := i % 4
		r := laneRecord(keysInLane(lane, testLanes, 2)[i%2], at(0))
		if lane == 2 && i >= 10 {
			r.DeliverAt = at(time.Minute) // holds lane 2 from its third row on
		}
		recs = append(recs, r)
		if i%5 == 0 {
			recs = append(recs, NewRecord(at(0)))
		}
	}
	e.insert(recs...)
	q := outbox.HeadLanesQuery{Lanes: []int{2, 0, 1}, Window: 1000, LaneLimit: 4, Now: at(0)}
	got, full := e.headLanes(lb, q)
	if full {
		t.Fatalf("HeadLanes with a window over every row: full = true")
	}
	if !slices.IsSortedFunc(got, func(a, b outbox.Record) int { return a.ID.Compare(b.ID) }) {
		t.Fatalf("HeadLanes rows not in ID order: %s", idList(ids(got)))
	}
	byID := make(map[outbox.ID]outbox.Record)
	for _, r := range recs {
		byID[r.ID] = r
	}
	for lane := range testLanes {
		want := []outbox.ID{}
		if slices.Contains(q.Lanes, lane) {
			want = ids(e.head(lane, q.LaneLimit, q.Now, false))
		}
		sameIDs(t, "HeadLanes rows of a lane against Head", ids(ofLane(got, lane)), want)
	}
	for _, r := range got {
		checkRecord(t, "HeadLanes row", r, stored(byID[r.ID]))
	}
	if len(ofLane(got, 2)) != 2 {
		t.Fatalf("lane 2: %d rows, want the 2 before its row not due", len(ofLane(got, 2)))
	}
	again, _ := e.headLanes(lb, q)
	sameIDs(t, "HeadLanes again (nothing changed)", ids(again), ids(got))
	// Reusing dst: the rows come back in dst's storage.
	dst := make([]outbox.Record, 0, 64)
	got2, _, err := lb.HeadLanes(e.ctx, q, dst)
	if err != nil || len(got2) != len(got) || &got2[0] != &dst[:1][0] {
		t.Fatalf("HeadLanes into dst = %d rows, %v; want %d rows in dst's storage", len(got2), err, len(got))
	}
}

// The window is the table's first Window rows in ID order, whatever they are (parked
// and unordered rows count): a listed lane gets only its rows among them, and full says
// whether the window held Window rows.
func testHeadLanesWindow(t *testing.T, h Harness) {
	e := newEnv(t, h)
	lb := e.batcher(t)
	k0, k3 := keysInLane(0, testLanes, 1)[0], keysInLane(3, testLanes, 1)[0]
	var recs []outbox.Record
	for range 6 {
		recs = append(recs, laneRecord(k0, at(0)), NewRecord(at(0)), laneRecord(k3, at(0)))
	}
	e.insert(recs...)
	e.park(recs[0].ID, "poison", at(0)) // in the window, never returned
	zero := ofLane(recs, 0)[1:]         // lane 0's pending rows
	three := ofLane(recs, 3)
	// The first 4 rows: lane 0's parked row, an unordered row, lane 3's 1st, lane 0's 2nd.
	got, full := e.headLanes(lb, outbox.HeadLanesQuery{Lanes: []int{0}, Window: 4, LaneLimit: 100, Now: at(0)})
	if !full {
		t.Fatalf("HeadLanes, window 4 of 18 rows: full = false")
	}
	sameIDs(t, "lane 0 within a window of 4", ids(got), idsOf(zero[0]))
	got, full = e.headLanes(lb, outbox.HeadLanesQuery{Lanes: []int{0, 3}, Window: 18, LaneLimit: 100, Now: at(0)})
	if !full {
		t.Fatalf("HeadLanes, window 18 of 18 rows: full = false (the window held Window rows)")
	}
	if len(got) != 11 {
		t.Fatalf("HeadLanes, window 18: %d rows, want the 11 pending lane rows", len(got))
	}
	got, full = e.headLanes(lb, outbox.HeadLanesQuery{Lanes: []int{3}, Window: 19, LaneLimit: 100, Now: at(0)})
	if full {
		t.Fatalf("HeadLanes, window 19 of 18 rows: full = true")
	}
	sameIDs(t, "lane 3, window over every row", ids(got), ids(three))
	if got, full := e.headLanes(lb, outbox.HeadLanesQuery{Lanes: []int{5}, Window: 100, LaneLimit: 100, Now: at(0)}); len(got) != 0 || full {
		t.Fatalf("HeadLanes of an empty lane = %d rows, full %v", len(got), full)
	}
}

// With HoldParkedKeys, a parked key's later rows are passed over in each lane, as Head
// passes them over; the other keys flow.
func testHeadLanesParked(t *testing.T, h Harness) {
	e := newEnv(t, h)
	lb := e.batcher(t)
	var recs []outbox.Record
	for _, lane := range []int{1, 6} {
		keys := keysInLane(lane, testLanes, 2)
		recs = append(recs, laneRecord(keys[0], at(0)), laneRecord(keys[1], at(0)), laneRecord(keys[0], at(0)), laneRecord(keys[1], at(0)))
	}
	e.insert(recs...)
	e.park(recs[0].ID, "poison", at(0)) // lane 1's first key
	q := outbox.HeadLanesQuery{Lanes: []int{1, 6}, Window: 100, LaneLimit: 10, Now: at(0), HoldParkedKeys: true}
	got, _ := e.headLanes(lb, q)
	sameIDs(t, "lane 1 with HoldParkedKeys", ids(ofLane(got, 1)), ids(e.head(1, 10, at(0), true)))
	sameIDs(t, "lane 1 with HoldParkedKeys", ids(ofLane(got, 1)), idsOf(recs[1], recs[3]))
	sameIDs(t, "lane 6 with HoldParkedKeys", ids(ofLane(got, 6)), ids(recs[4:]))
	q.HoldParkedKeys = false
	got, _ = e.headLanes(lb, q)
	sameIDs(t, "lane 1 without HoldParkedKeys", ids(ofLane(got, 1)), ids(recs[1:4]))
}

// CompleteLanes deletes the listed pending rows of each lane whose lease is live, and
// counts them per lease: a stale token deletes nothing of its lane, an expired lease
// neither, and parked or unordered rows among the IDs stay.
func testCompleteLanes(t *testing.T, h Harness) {
	e := newEnv(t, h)
	lb := e.batcher(t)
	r2, r4, r5, r7 := e.laneRows(2, 3), e.laneRows(4, 2), e.laneRows(5, 2), e.laneRows(7, 2)
	u := NewRecord(at(0))
	e.insert(u)
	e.park(r2[2].ID, "p", at(0))
	l2, l4 := e.acquire(2), e.acquire(4)
	e.acquire(5)
	l7 := e.acquireTTL(7, shortTTL)
	e.waitExpired(7, l7)
	all := slices.Concat(ids(r2), ids(r4), ids(r5), ids(r7), []outbox.ID{u.ID})
	leases := []outbox.LaneLease{{Lane: 4, Token: l4}, {Lane: 2, Token: l2}, {Lane: 5, Token: outbox.NewToken()}, {Lane: 7, Token: l7}}
	got, err := lb.CompleteLanes(e.ctx, outbox.CompleteLanesParams{IDs: all, Leases: leases}, nil)
	if err != nil {
		t.Fatalf("CompleteLanes: %v", err)
	}
	if want := []int{2, 2, 0, 0}; !slices.Equal(got, want) {
		t.Fatalf("CompleteLanes deleted %v per lease, want %v", got, want)
	}
	if n := e.rawCount(e.opts.OutboxTable()); n != 6 {
		t.Fatalf("rows left %d, want 6 (lane 2's parked row, lanes 5 and 7, the unordered row)", n)
	}
	got, err = lb.CompleteLanes(e.ctx, outbox.CompleteLanesParams{IDs: all, Leases: leases}, got)
	if err != nil || !slices.Equal(got, []int{0, 0, 0, 0}) {
		t.Fatalf("CompleteLanes again = %v, %v; want nothing deleted", got, err)
	}
}

// HeadLanes and CompleteLanes refuse what the contract forbids, with ErrInvalidArgument.
func testLaneBatchArguments(t *testing.T, h Harness) {
	e := newEnv(t, h)
	lb := e.batcher(t)
	tok := outbox.NewToken()
	for _, q := range []outbox.HeadLanesQuery{
		{Lanes: []int{0}, Window: 0, LaneLimit: 1},
		{Lanes: []int{0}, Window: 1, LaneLimit: 0},
		{Lanes: []int{testLanes}, Window: 1, LaneLimit: 1},
		{Lanes: []int{outbox.Unordered}, Window: 1, LaneLimit: 1},
		{Lanes: []int{1, 1}, Window: 1, LaneLimit: 1},
	} {
		if _, _, err := lb.HeadLanes(e.ctx, q, nil); !errors.Is(err, outbox.ErrInvalidArgument) {
			t.Errorf("HeadLanes(%+v) = %v, want ErrInvalidArgument", q, err)
		}
	}
	for _, leases := range [][]outbox.LaneLease{
		{{Lane: testLanes, Token: tok}},
		{{Lane: outbox.Unordered, Token: tok}},
		{{Lane: 3, Token: tok}, {Lane: 3, Token: outbox.NewToken()}},
	} {
		if _, err := lb.CompleteLanes(e.ctx, outbox.CompleteLanesParams{IDs: []outbox.ID{outbox.NewID()}, Leases: leases}, nil); !errors.Is(err, outbox.ErrInvalidArgument) {
			t.Errorf("CompleteLanes(%+v) = %v, want ErrInvalidArgument", leases, err)
		}
	}
}
