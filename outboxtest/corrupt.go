package outboxtest

import (
	"encoding/binary"
	"errors"
	"testing"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/headercodec"
)

func corruptTests() []subtest {
	return []subtest{
		{"HeadersRead", testCorruptRead},
		{"HeadersClaim", testCorruptClaim},
		{"HeadersLaneHead", testCorruptLaneHead},
	}
}

// corruptHeaders returns two header encodings that fail to decode yet pass any length
// check a schema might have: an unknown version, and a value length past the end.
func corruptHeaders() [][]byte {
	badVersion := binary.LittleEndian.AppendUint32(nil, 2)
	badVersion = binary.LittleEndian.AppendUint32(badVersion, 0)
	badVersion = append(badVersion, 0, 0, 0, 0)
	good := headercodec.Encode(nil, []headercodec.Header{{Name: "n", Value: []byte("value")}})
	truncated := good[:len(good)-1]
	return [][]byte{badVersion, truncated}
}

// corrupt overwrites the headers column of row id through raw SQL.
func (e *env) corrupt(id outbox.ID, headers []byte) {
	e.t.Helper()
	e.exec("UPDATE "+e.outboxTable()+" SET headers = "+e.h.Placeholder(1)+" WHERE id = "+e.h.Placeholder(2), headers, id[:])
}

// checkCorrupt checks that got marks exactly the rows in bad as corrupt, each with a
// *CorruptRowError naming it, and returns the others untouched.
func checkCorrupt(t *testing.T, what string, got []outbox.Record, recs []outbox.Record, bad map[outbox.ID]bool, claimed outbox.Token, until time.Time) {
	t.Helper()
	sameIDs(t, what, ids(got), ids(recs))
	for i, r := range got {
		if !bad[r.ID] {
			want := stored(recs[i])
			if !claimed.IsZero() {
				want.ClaimToken, want.ClaimExpiresAt = claimed, until
			}
			checkRecord(t, what+": sound row", r, want)
			continue
		}
		var cre *outbox.CorruptRowError
		if !errors.As(r.Corrupt, &cre) {
			t.Errorf("%s: row %s: Corrupt = %v; want a *outbox.CorruptRowError", what, r.ID, r.Corrupt)
			continue
		}
		if cre.ID != r.ID || cre.Column != "headers" {
			t.Errorf("%s: row %s: CorruptRowError names row %s column %q; want this row, \"headers\"", what, r.ID, cre.ID, cre.Column)
		}
		if r.Destination != recs[i].Destination || string(r.Body) != string(recs[i].Body) {
			t.Errorf("%s: corrupt row %s: the readable fields were not filled in", what, r.ID)
		}
	}
}

func (e *env) corruptSet() ([]outbox.Record, map[outbox.ID]bool) {
	e.t.Helper()
	recs := make([]outbox.Record, 5)
	for i := range recs {
		recs[i] = NewRecord(at(0))
	}
	e.insert(recs...)
	bad := map[outbox.ID]bool{}
	for i, hs := range corruptHeaders() {
		id := recs[1+2*i].ID
		e.corrupt(id, hs)
		bad[id] = true
	}
	return recs, bad
}

// A row with corrupt headers comes back from Read marked Corrupt, naming it; the other
// rows come back normally.
func testCorruptRead(t *testing.T, h Harness) {
	e := newEnv(t, h)
	recs, bad := e.corruptSet()
	checkCorrupt(t, "Read", e.read(outbox.Unordered, outbox.ID{}, at(0), 10), recs, bad, outbox.Token{}, time.Time{})
	// Records reused after a corrupt row must not stay marked.
	dst := make([]outbox.Record, 10)
	if _, err := e.store.Read(e.ctx, outbox.ReadQuery{Lane: outbox.Unordered, Now: at(0)}, dst); err != nil {
		t.Fatal(err)
	}
	got, err := e.store.Read(e.ctx, outbox.ReadQuery{Lane: outbox.Unordered, After: recs[0].ID, Now: at(0)}, dst)
	if err != nil {
		t.Fatal(err)
	}
	checkCorrupt(t, "second Read into the same records", cloneRecords(got), recs[1:], bad, outbox.Token{}, time.Time{})
}

// Claim returns the corrupt rows marked, claimed like the others, so that the forwarder
// can park exactly them.
func testCorruptClaim(t *testing.T, h Harness) {
	e := newEnv(t, h)
	recs, bad := e.corruptSet()
	until := at(time.Minute)
	tok, got := e.claimUnordered(10, at(0), until)
	checkCorrupt(t, "Claim", got, recs, bad, tok, until)
	var good []outbox.ID
	for _, r := range recs {
		if bad[r.ID] {
			ok, err := e.store.Fail(e.ctx, outbox.FailParams{Lane: outbox.Unordered, ID: r.ID, Token: tok, Now: at(time.Second), Error: "corrupt", Park: true})
			wantBool(t, "Fail+Park of the corrupt row", ok, err, true)
		} else {
			good = append(good, r.ID)
		}
	}
	n, err := e.store.Complete(e.ctx, outbox.CompleteParams{Lane: outbox.Unordered, Token: tok, IDs: good, Now: at(time.Second)})
	wantN(t, "Complete of the sound rows", n, err, len(good))
	if p := e.parked(); len(p) != len(bad) {
		t.Fatalf("%d parked rows, want %d", len(p), len(bad))
	}
}

// A corrupt head of a lane is claimed (marked) rather than blocking the lane silently.
func testCorruptLaneHead(t *testing.T, h Harness) {
	e := newEnv(t, h)
	recs := e.laneRows(3, 3)
	e.corrupt(recs[0].ID, corruptHeaders()[0])
	lease := e.acquire(3)
	tok, got := e.claimLane(3, 10, lease, at(0), at(time.Minute))
	checkCorrupt(t, "lane Claim", got, recs, map[outbox.ID]bool{recs[0].ID: true}, tok, at(time.Minute))
	// Park without a claim works too (the claim has expired here).
	e.park(recs[0].ID, "corrupt headers", at(time.Minute))
	_, got = e.claimLane(3, 10, lease, at(time.Minute), at(2*time.Minute))
	sameIDs(t, "lane claim after parking the corrupt head", ids(got), ids(recs[1:]))
}
