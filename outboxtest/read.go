package outboxtest

import (
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
)

func readTests() []subtest {
	return []subtest{
		{"IDsAscendingAcrossMilliseconds", testIDsAscending},
		{"AfterCursorExclusive", testAfterCursor},
		{"LimitIsLenDst", testReadLimit},
		{"LaneSelection", testLaneSelection},
		{"ReusedDstIsReset", testReusedDst},
	}
}

// idAt builds an ID with millisecond timestamp ms and every random byte set to fill.
func idAt(ms uint64, fill byte) outbox.ID {
	var id outbox.ID
	var ts [8]byte
	binary.BigEndian.PutUint64(ts[:], ms)
	copy(id[:6], ts[2:])
	for i := 6; i < len(id); i++ {
		id[i] = fill
	}
	return id
}

// Rows come back in ID (= time) order across millisecond boundaries, including those
// that carry into higher timestamp bytes while the random bytes fall, whatever order
// they were inserted in.
func testIDsAscending(t *testing.T, h Harness) {
	e := newEnv(t, h)
	var want []outbox.ID
	for _, ms := range []uint64{0x00FF_FFFF_FFFF, 0x0100_0000_0000, 0x0100_0000_00FF, 0x0100_0000_0100, 0x0100_0001_0000} {
		want = append(want, idAt(ms, 0x00), idAt(ms, 0x7f), idAt(ms, 0x80), idAt(ms, 0xff))
	}
	// IDs made by this process over several real milliseconds.
	first := outbox.NewID()
	want = append(want, first)
	for ms := first.Time(); len(want) < 40 || outbox.NewID().Time().Sub(ms) < 3*time.Millisecond; {
		want = append(want, outbox.NewID())
		time.Sleep(200 * time.Microsecond)
	}
	slices.SortFunc(want, func(a, b outbox.ID) int { return a.Compare(b) })
	recs := make([]outbox.Record, len(want))
	for i, id := range want {
		recs[i] = NewRecord(at(0))
		recs[i].ID = id
	}
	rand.New(rand.NewPCG(3, 4)).Shuffle(len(recs), func(i, j int) { recs[i], recs[j] = recs[j], recs[i] })
	e.insert(recs[:len(recs)/2]...)
	e.insert(recs[len(recs)/2:]...)
	sameIDs(t, "Read", e.readIDs(outbox.Unordered, at(0)), want)
	_, claimed := e.claimUnordered(len(want), at(0), at(time.Minute))
	sameIDs(t, "Claim", ids(claimed), want)
}

// After is exclusive: rows with ID > After only, from any cursor position.
func testAfterCursor(t *testing.T, h Harness) {
	e := newEnv(t, h)
	var recs []outbox.Record
	for i := 0; i < 5; i++ {
		r := NewRecord(at(0))
		r.ID = idAt(uint64(1000+10*i), 0x10)
		recs = append(recs, r)
	}
	e.insert(recs...)
	all := ids(recs)
	for i := range all {
		got := ids(e.read(outbox.Unordered, all[i], at(0), 10))
		sameIDs(t, "Read after row "+strconv.Itoa(i), got, all[i+1:])
	}
	sameIDs(t, "Read after the zero ID", ids(e.read(outbox.Unordered, outbox.ID{}, at(0), 10)), all)
	// A cursor between two rows (not itself a row) and one past every row.
	between := idAt(1000+10*2+5, 0)
	sameIDs(t, "Read after a cursor between rows", ids(e.read(outbox.Unordered, between, at(0), 10)), all[3:])
	past := idAt(0xFFFF_FFFF_FFFF, 0xff)
	sameIDs(t, "Read after the greatest ID", ids(e.read(outbox.Unordered, past, at(0), 10)), nil)
	// Paging with the cursor visits every row once.
	var paged []outbox.ID
	var after outbox.ID
	for {
		page := e.read(outbox.Unordered, after, at(0), 2)
		if len(page) == 0 {
			break
		}
		paged = append(paged, ids(page)...)
		after = page[len(page)-1].ID
	}
	sameIDs(t, "paging by 2", paged, all)
}

// Read never returns more rows than len(dst), whatever cap(dst), and fills dst itself.
func testReadLimit(t *testing.T, h Harness) {
	e := newEnv(t, h)
	recs := e.insertNew(10)
	for _, n := range []int{0, 1, 3, 9, 10, 11} {
		dst := make([]outbox.Record, n, n+20)
		got, err := e.store.Read(e.ctx, outbox.ReadQuery{Lane: outbox.Unordered, Now: at(0)}, dst)
		if err != nil {
			t.Fatalf("Read(len %d): %v", n, err)
		}
		want := min(n, len(recs))
		sameIDs(t, "Read into len "+strconv.Itoa(n), ids(got), ids(recs[:want]))
		if len(got) > 0 && &got[0] != &dst[0] {
			t.Errorf("Read into len %d did not reuse dst's storage", n)
		}
	}
	got, err := e.store.Read(e.ctx, outbox.ReadQuery{Lane: outbox.Unordered, Now: at(0)}, nil)
	if err != nil || len(got) != 0 {
		t.Fatalf("Read(nil dst) = %d rows, %v; want 0, nil", len(got), err)
	}
}

// One lane's read returns that lane's rows only; an unordered read only NULL-lane rows.
func testLaneSelection(t *testing.T, h Harness) {
	e := newEnv(t, h)
	k1, k2 := keysInLane(1, testLanes, 2), keysInLane(2, testLanes, 1)
	u1 := NewRecord(at(0))
	a1 := laneRecord(k1[0], at(0))
	b1 := laneRecord(k2[0], at(0))
	u2 := NewRecord(at(0))
	a2 := laneRecord(k1[1], at(0))
	e.insert(u1, a1, b1, u2, a2)
	sameIDs(t, "unordered", e.readIDs(outbox.Unordered, at(0)), idsOf(u1, u2))
	sameIDs(t, "lane 1", e.readIDs(1, at(0)), idsOf(a1, a2))
	sameIDs(t, "lane 2", e.readIDs(2, at(0)), idsOf(b1))
	sameIDs(t, "lane 3", e.readIDs(3, at(0)), nil)
	sameIDs(t, "lane 0", e.readIDs(0, at(0)), nil)
	// Claims select the same way.
	_, got := e.claimUnordered(10, at(0), at(time.Minute))
	sameIDs(t, "unordered claim", ids(got), idsOf(u1, u2))
	lease := e.acquire(1)
	_, got = e.claimLane(1, 1, lease, at(0), at(time.Minute))
	sameIDs(t, "lane 1 claim", ids(got), idsOf(a1))
	// Read is not a claim: the rows behind a claimed head are eligible and read.
	sameIDs(t, "lane 1 read behind a claimed head", e.readIDs(1, at(0)), idsOf(a2))
}

// Records reused from an earlier call carry nothing over into rows whose optional
// columns are NULL (Read reuses dst; Claim appends to dst[:0]).
func testReusedDst(t *testing.T, h Harness) {
	e := newEnv(t, h)
	r := NewRecord(at(0))
	e.insert(r)
	dirty := func() []outbox.Record {
		d := make([]outbox.Record, 3)
		for i := range d {
			d[i] = outbox.Record{
				ID: outbox.NewID(), MessageUUID: "stale", Lane: 5, OrderingKey: "stale", Transport: "stale",
				Destination: "stale", MessageType: "stale", Headers: []byte("stale headers"), Body: []byte("stale body"),
				TenantID: "stale", CreatedAt: far, DeliverAt: far, Attempts: 9, LastError: "stale",
				Status: outbox.StatusParked, ClaimToken: outbox.NewToken(), ClaimExpiresAt: far,
				Corrupt: &outbox.CorruptRowError{Column: "stale"},
			}
		}
		return d
	}
	got, err := e.store.Read(e.ctx, outbox.ReadQuery{Lane: outbox.Unordered, Now: at(0)}, dirty())
	if err != nil || len(got) != 1 {
		t.Fatalf("Read = %d rows, %v; want 1", len(got), err)
	}
	checkRecord(t, "Read into a used record", got[0], stored(r))

	tok := outbox.NewToken()
	until := at(time.Minute)
	got, err = e.store.Claim(e.ctx, outbox.ClaimParams{Lane: outbox.Unordered, Limit: 3, Now: at(0), Until: until, Token: tok}, dirty())
	if err != nil || len(got) != 1 {
		t.Fatalf("Claim = %d rows, %v; want 1", len(got), err)
	}
	want := stored(r)
	want.ClaimToken, want.ClaimExpiresAt = tok, until
	checkRecord(t, "Claim into a used record", got[0], want)
}
