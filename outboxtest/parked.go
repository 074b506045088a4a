package outboxtest

import (
	"bytes"
	"errors"
	"testing"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
)

func parkedTests() []subtest {
	return []subtest{
		{"List", testParkedList},
		{"Requeue", testRequeue},
		{"Purge", testPurge},
		{"FilterSelectors", testParkedFilterSelectors},
		{"SameRowsEveryFilter", testParkedSameRows},
		{"ListBoundsBodies", testParkedListMaxBody},
		{"RequeueOnDatabaseClock", testRequeueDatabaseClock},
	}
}

// parkedSet inserts pending and parked rows: parked rows of key a (lane), key b (lane)
// and unordered ones, plus a pending row of key a and an unordered pending row.
type parkedSet struct {
	a, b           string
	parkedA        []outbox.Record
	parkedB        []outbox.Record
	parkedU        []outbox.Record
	pendingA, pend outbox.Record
	all            []outbox.Record // every parked row, in ID order
}

func (e *env) parkedSet() parkedSet {
	e.t.Helper()
	keys := keysInLane(2, testLanes, 2)
	s := parkedSet{a: keys[0], b: keys[1]}
	var recs []outbox.Record
	for i := 0; i < 7; i++ {
		var r outbox.Record
		switch i % 3 {
		case 0:
			r = laneRecord(s.a, at(0))
			s.parkedA = append(s.parkedA, r)
		case 1:
			r = laneRecord(s.b, at(0))
			s.parkedB = append(s.parkedB, r)
		default:
			r = NewRecord(at(0))
			s.parkedU = append(s.parkedU, r)
		}
		recs = append(recs, r)
	}
	s.all = recs
	s.pendingA, s.pend = laneRecord(s.a, at(0)), NewRecord(at(0))
	e.insert(append(recs, s.pendingA, s.pend)...)
	for _, r := range recs {
		e.park(r.ID, "reason "+r.ID.String(), at(0))
	}
	return s
}

// ListParked pages through parked rows in ID order, optionally of one ordering key, and
// never lists pending rows.
func testParkedList(t *testing.T, h Harness) {
	e := newEnv(t, h)
	s := e.parkedSet()
	var paged []outbox.ID
	var after outbox.ID
	for pages := 0; ; pages++ {
		got, err := e.store.ListParked(e.ctx, outbox.ParkedQuery{After: after, Limit: 3})
		if err != nil {
			t.Fatalf("ListParked: %v", err)
		}
		if len(got) > 3 {
			t.Fatalf("ListParked with Limit 3 = %d rows", len(got))
		}
		if len(got) == 0 {
			break
		}
		for _, r := range got {
			want := stored(s.byID(r.ID))
			want.Status, want.LastError, want.BodySize = outbox.StatusParked, "reason "+r.ID.String(), len(want.Body)
			checkRecord(t, "listed row", cloneRecord(r), want)
		}
		paged = append(paged, ids(got)...)
		after = got[len(got)-1].ID
		if pages > 10 {
			t.Fatalf("ListParked does not advance past %s", after)
		}
	}
	sameIDs(t, "paging by 3", paged, ids(s.all))
	got, err := e.store.ListParked(e.ctx, outbox.ParkedQuery{Limit: 100, OrderingKey: &s.a})
	if err != nil {
		t.Fatal(err)
	}
	sameIDs(t, "parked rows of key a", ids(got), ids(s.parkedA))
	got, err = e.store.ListParked(e.ctx, outbox.ParkedQuery{After: s.parkedB[0].ID, Limit: 1, OrderingKey: &s.b})
	if err != nil {
		t.Fatal(err)
	}
	sameIDs(t, "second parked row of key b", ids(got), ids(s.parkedB[1:2]))
}

func (s parkedSet) byID(id outbox.ID) outbox.Record {
	for _, r := range s.all {
		if r.ID == id {
			return r
		}
	}
	return outbox.Record{}
}

// Requeue moves the selected parked rows back to pending, due at the database's now,
// attempts reset; pending rows are never touched.
func testRequeue(t *testing.T, h Harness) {
	e := newEnv(t, h)
	s := e.parkedSet()
	// Give the pending row an attempt so that a requeue touching it would show.
	tok, _ := e.claimUnordered(1, at(0), at(time.Second))
	if !e.fail(outbox.FailParams{Lane: outbox.Unordered, ID: s.pend.ID, Token: tok, Now: at(0), Error: "pending failure"}) {
		t.Fatalf("setup: Fail = false")
	}
	requeue := func(f outbox.ParkedFilter, want int) {
		t.Helper()
		n, err := e.store.Requeue(e.ctx, f)
		wantN(t, "Requeue", n, err, want)
	}
	before := e.dbNow()
	requeue(outbox.ParkedFilter{IDs: idsOf(s.parkedU[0], s.pend, s.pendingA)}, 1)
	requeue(outbox.ParkedFilter{OrderingKey: &s.a}, len(s.parkedA))
	after := e.dbNow()
	for _, r := range append([]outbox.Record{s.parkedU[0]}, s.parkedA...) {
		// Due at the database's now, with attempts reset.
		found := false
		for _, g := range e.read(r.Lane, outbox.ID{}, after.Add(us), 100) {
			if g.ID == r.ID {
				found = true
				if g.Attempts != 0 || g.Status != outbox.StatusPending || !onDatabaseClock(g.DeliverAt, before, after) {
					t.Errorf("requeued row %s: attempts %d status %q due %s; want 0, pending, due between %s and %s (the database's clock)",
						r.ID, g.Attempts, g.Status, fmtTime(g.DeliverAt), fmtTime(before), fmtTime(after))
				}
			}
		}
		if !found {
			t.Errorf("requeued row %s is not eligible at the database's now", r.ID)
		}
	}
	if n := e.count(before.Add(-10 * us)); n != 2 {
		t.Fatalf("Count before the requeue = %d, want 2 (the pending rows only)", n)
	}
	now := after.Add(us)
	pend := e.read(outbox.Unordered, outbox.ID{}, now, 10)
	for _, g := range pend {
		if g.ID == s.pend.ID && (g.Attempts != 1 || g.LastError != "pending failure") {
			t.Errorf("Requeue changed a pending row: attempts %d error %q", g.Attempts, g.LastError)
		}
	}
	left := len(s.parkedB) + len(s.parkedU) - 1
	if p := e.parked(); len(p) != left {
		t.Fatalf("%d parked rows left, want %d", len(p), left)
	}
	requeue(outbox.ParkedFilter{All: true}, left)
	if p := e.parked(); len(p) != 0 {
		t.Fatalf("%d parked rows left after requeueing all", len(p))
	}
	if n := e.count(far); n != int64(len(s.all)+2) {
		t.Fatalf("Count = %d, want every row (%d)", n, len(s.all)+2)
	}
}

// Purge deletes the selected parked rows and never a pending one.
func testPurge(t *testing.T, h Harness) {
	e := newEnv(t, h)
	s := e.parkedSet()
	purge := func(f outbox.ParkedFilter, want int) {
		t.Helper()
		n, err := e.store.Purge(e.ctx, f)
		wantN(t, "Purge", n, err, want)
	}
	purge(outbox.ParkedFilter{IDs: idsOf(s.parkedU[0], s.pend)}, 1)
	purge(outbox.ParkedFilter{OrderingKey: &s.b}, len(s.parkedB))
	var wantLeft []outbox.ID
	for _, r := range s.all {
		if r.ID != s.parkedU[0].ID && r.OrderingKey != s.b {
			wantLeft = append(wantLeft, r.ID)
		}
	}
	sameIDs(t, "parked rows left", ids(e.parked()), wantLeft)
	purge(outbox.ParkedFilter{All: true}, len(wantLeft))
	if n := e.rawCount(e.opts.OutboxTable()); n != 2 {
		t.Fatalf("%d rows left, want the 2 pending ones", n)
	}
	sameIDs(t, "pending rows", e.readIDs(outbox.Unordered, far), idsOf(s.pend))
}

// A filter with no selector or several selectors is an error, and changes nothing.
func testParkedFilterSelectors(t *testing.T, h Harness) {
	e := newEnv(t, h)
	s := e.parkedSet()
	bad := []outbox.ParkedFilter{
		{},
		{IDs: idsOf(s.parkedU[0]), All: true},
		{IDs: idsOf(s.parkedA[0]), OrderingKey: &s.a},
		{OrderingKey: &s.a, All: true},
		{IDs: idsOf(s.parkedA[0]), OrderingKey: &s.a, All: true},
	}
	for _, f := range bad {
		if n, err := e.store.Requeue(e.ctx, f); !errors.Is(err, outbox.ErrInvalidArgument) {
			t.Errorf("Requeue(%+v) = %d, %v; want an error wrapping outbox.ErrInvalidArgument", f, n, err)
		}
		if n, err := e.store.Purge(e.ctx, f); !errors.Is(err, outbox.ErrInvalidArgument) {
			t.Errorf("Purge(%+v) = %d, %v; want an error wrapping outbox.ErrInvalidArgument", f, n, err)
		}
	}
	if p := e.parked(); len(p) != len(s.all) {
		t.Fatalf("%d parked rows left, want %d", len(p), len(s.all))
	}
}

// ListParked, Requeue and Purge select the same rows for every filter: any key, one key,
// the key "" (rows without a key, NULL in the table), a key no row has, listed ids
// (parked ones, a pending one and an unknown one) and all. An operator who lists before
// purging sees exactly what the purge deletes.
func testParkedSameRows(t *testing.T, h Harness) {
	e := newEnv(t, h)
	empty, none := "", "no-such-key"
	filters := []struct {
		name string
		f    func(s parkedSet) (outbox.ParkedFilter, *string, []outbox.ID)
	}{
		{"all", func(parkedSet) (outbox.ParkedFilter, *string, []outbox.ID) {
			return outbox.ParkedFilter{All: true}, nil, nil
		}},
		{"key a", func(s parkedSet) (outbox.ParkedFilter, *string, []outbox.ID) {
			return outbox.ParkedFilter{OrderingKey: &s.a}, &s.a, nil
		}},
		{`key ""`, func(parkedSet) (outbox.ParkedFilter, *string, []outbox.ID) {
			return outbox.ParkedFilter{OrderingKey: &empty}, &empty, nil
		}},
		{"unknown key", func(parkedSet) (outbox.ParkedFilter, *string, []outbox.ID) {
			return outbox.ParkedFilter{OrderingKey: &none}, &none, nil
		}},
		{"ids", func(s parkedSet) (outbox.ParkedFilter, *string, []outbox.ID) {
			sel := append(idsOf(s.parkedA[0], s.parkedU[1], s.pend), outbox.NewID())
			return outbox.ParkedFilter{IDs: sel}, nil, sel
		}},
	}
	for _, fl := range filters {
		for _, action := range []string{"requeue", "purge"} {
			s := e.parkedSet()
			f, key, sel := fl.f(s)
			listed := e.listParked(key)
			if sel != nil {
				listed = keep(listed, sel)
			}
			if fl.name == `key ""` && len(listed) != len(s.parkedU) {
				t.Errorf(`ListParked(key "") lists %d rows, want the %d parked rows without a key`, len(listed), len(s.parkedU))
			}
			var n int
			var err error
			if action == "requeue" {
				n, err = e.store.Requeue(e.ctx, f)
			} else {
				n, err = e.store.Purge(e.ctx, f)
			}
			wantN(t, fl.name+": "+action+" of the listed rows", n, err, len(listed))
			sameIDs(t, fl.name+": parked rows left after "+action, ids(e.parked()), minus(ids(s.all), listed))
			if _, err := e.store.Purge(e.ctx, outbox.ParkedFilter{All: true}); err != nil {
				t.Fatalf("Purge(all): %v", err)
			}
		}
	}
}

// listParked lists every parked row of key (nil = any key) through ListParked.
func (e *env) listParked(key *string) []outbox.ID {
	e.t.Helper()
	got, err := e.store.ListParked(e.ctx, outbox.ParkedQuery{Limit: 1000, OrderingKey: key})
	if err != nil {
		e.t.Fatalf("ListParked: %v", err)
	}
	return ids(got)
}

// keep returns the ids of all that are in sel, in the order of all.
func keep(all, sel []outbox.ID) []outbox.ID {
	var out []outbox.ID
	for _, id := range all {
		for _, s := range sel {
			if id == s {
				out = append(out, id)
				break
			}
		}
	}
	return out
}

// minus returns the ids of all that are not in drop, in the order of all.
func minus(all, drop []outbox.ID) []outbox.ID {
	out := []outbox.ID{}
	for _, id := range all {
		if len(keep([]outbox.ID{id}, drop)) == 0 {
			out = append(out, id)
		}
	}
	return out
}

// Requeue stamps deliver_at with the database's clock, whatever the caller's says: a
// requeued row may head its lane, and a caller's clock running ahead would hold the
// lane until it came round.
func testRequeueDatabaseClock(t *testing.T, h Harness) {
	e := newEnv(t, h)
	s := e.parkedSet()
	before := e.dbNow()
	n, err := e.store.Requeue(e.ctx, outbox.ParkedFilter{All: true})
	wantN(t, "Requeue(all)", n, err, len(s.all))
	after := e.dbNow()
	requeued := append(e.read(s.parkedA[0].Lane, outbox.ID{}, far, 100), e.read(outbox.Unordered, outbox.ID{}, far, 100)...)
	for _, r := range requeued {
		if r.ID == s.pendingA.ID || r.ID == s.pend.ID {
			continue // never parked
		}
		if !onDatabaseClock(r.DeliverAt, before, after) {
			t.Errorf("requeued row %s is due at %s, want between %s and %s (the database's clock)",
				r.ID, fmtTime(r.DeliverAt), fmtTime(before), fmtTime(after))
		}
	}
	if n := e.count(after.Add(us)); n != int64(len(s.all)+2) {
		t.Errorf("Count at the database's now = %d, want every row (%d)", n, len(s.all)+2)
	}
}

// onDatabaseClock reports whether t lies between two readings of the database's clock,
// give or take the rounding of the column (a microsecond).
func onDatabaseClock(t, before, after time.Time) bool {
	return !t.Before(before.Add(-us)) && !t.After(after.Add(us))
}

// dbNow reads the database's clock through the store: a lease taken for an hour expires
// an hour after the database's now.
func (e *env) dbNow() time.Time {
	e.t.Helper()
	lane := testLanes - 1
	tok := e.acquireTTL(lane, time.Hour)
	defer func() {
		if _, err := e.store.ReleaseLease(e.ctx, lane, tok); err != nil {
			e.t.Fatalf("ReleaseLease: %v", err)
		}
	}()
	for _, l := range e.leases() {
		if l.Lane == lane && l.Token == tok {
			return l.ExpiresAt.Add(-time.Hour)
		}
	}
	e.t.Fatalf("the lease of lane %d is not listed", lane)
	return time.Time{}
}

// ListParked with MaxBody reads at most that many bytes of each payload (its first
// ones) and gives the whole length in BodySize; without it, whole payloads.
func testParkedListMaxBody(t *testing.T, h Harness) {
	e := newEnv(t, h)
	big, small, empty := NewRecord(at(0)), NewRecord(at(0)), NewRecord(at(0))
	big.Body = bytes.Repeat([]byte{0, 1, 2, 0xff}, 256<<10) // 1 MiB, not text
	small.Body = []byte("tiny")
	empty.Body = []byte{}
	e.insert(big, small, empty)
	for _, r := range []outbox.Record{big, small, empty} {
		e.park(r.ID, "poison", at(0))
	}
	check := func(maxBody int) {
		t.Helper()
		got, err := e.store.ListParked(e.ctx, outbox.ParkedQuery{Limit: 10, MaxBody: maxBody})
		if err != nil {
			t.Fatalf("ListParked(MaxBody %d): %v", maxBody, err)
		}
		if len(got) != 3 {
			t.Fatalf("ListParked(MaxBody %d) = %d rows, want 3", maxBody, len(got))
		}
		for _, g := range got {
			var want []byte
			for _, r := range []outbox.Record{big, small, empty} {
				if r.ID == g.ID {
					want = r.Body
				}
			}
			prefix := want
			if maxBody > 0 && len(prefix) > maxBody {
				prefix = prefix[:maxBody]
			}
			if !bytes.Equal(g.Body, prefix) || g.BodySize != len(want) {
				t.Errorf("MaxBody %d: row %s has %d body bytes (size %d); want its first %d of %d", maxBody, g.ID, len(g.Body), g.BodySize, len(prefix), len(want))
			}
		}
	}
	check(16)
	check(0)
	if _, err := e.store.ListParked(e.ctx, outbox.ParkedQuery{Limit: 10, MaxBody: -1}); !errors.Is(err, outbox.ErrInvalidArgument) {
		t.Errorf("ListParked(MaxBody -1) = %v, want an error wrapping outbox.ErrInvalidArgument", err)
	}
}
