package outboxtest

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	outbox "github.com/relayer-go/watermill-outbox"
	"github.com/relayer-go/watermill-outbox/headercodec"
)

func roundTripTests() []subtest {
	return []subtest{
		{"Fields", testRoundTripFields},
		{"FieldsAmongBareRows", testRoundTripFieldsAmongBareRows},
		{"Headers", testRoundTripHeaders},
		{"Bodies", testRoundTripBodies},
		{"Timestamps", testRoundTripTimestamps},
		{"Nanoseconds", testRoundTripNanoseconds},
		{"TimeZones", testRoundTripTimeZones},
		{"InsertIgnoresState", testInsertIgnoresState},
	}
}

// fieldRecords returns records that between them set and leave empty every field.
func fieldRecords() []outbox.Record {
	keys := keysInLane(testLanes-1, testLanes, 1)
	bare := NewRecord(at(0))
	bare.MessageUUID = "6ba7b810-9dad-11d1-80b4-00c04fd430c8"
	bare.Headers = headercodec.Encode(nil, nil)
	bare.Body = []byte{}

	full := NewOrderedRecord(at(time.Microsecond), "order-42/ünïcødé", testLanes)
	full.MessageUUID = "01J0XQ5V3Z8Y6W4T2R0P9N7M5K ünï ✓"
	full.Transport = "kafka"
	full.Destination = "orders.v1/ünïcødé ✓"
	full.MessageType = "OrderPlaced.v2"
	full.TenantID = "tenant-7 ✓"
	full.DeliverAt = at(2*time.Second + 7*time.Microsecond)

	last := NewOrderedRecord(at(2*time.Microsecond), keys[0], testLanes)
	last.Transport = "amqp"
	last.Destination = "d"

	first := NewOrderedRecord(at(3*time.Microsecond), keysInLane(0, testLanes, 1)[0], testLanes)
	first.MessageType = "x"
	return []outbox.Record{bare, full, last, first}
}

// Every field survives a round trip, empty optional fields included, for unordered rows
// and for the first and last lane.
func testRoundTripFields(t *testing.T, h Harness) {
	e := newEnv(t, h)
	recs := fieldRecords()
	if recs[2].Lane != testLanes-1 || recs[3].Lane != 0 {
		t.Fatalf("test setup: lanes %d, %d", recs[2].Lane, recs[3].Lane)
	}
	e.insert(recs...)
	for _, r := range recs {
		got := e.read(r.Lane, outbox.ID{}, far, 10)
		if len(got) != 1 {
			t.Fatalf("lane %d: Read = %d rows, want 1", r.Lane, len(got))
		}
		checkRecord(t, "Read", got[0], stored(r))
	}
}

// A store may leave out of an INSERT the optional columns no row of the batch uses (they
// take their defaults). Every field still survives a round trip when one row of a large
// batch (40 rows, past any small-batch statement form) sets it and the others leave
// every optional field empty, and when no row sets any.
func testRoundTripFieldsAmongBareRows(t *testing.T, h Harness) {
	e := newEnv(t, h)
	var want []outbox.Record
	batch := func(special *outbox.Record) {
		recs := make([]outbox.Record, 0, 40)
		for i := range 40 {
			if i == 20 && special != nil {
				recs = append(recs, *special)
				continue
			}
			recs = append(recs, NewRecord(at(time.Duration(len(want)+i)*time.Millisecond)))
		}
		e.insert(recs...)
		want = append(want, recs...)
	}
	batch(nil)
	for _, r := range fieldRecords() {
		batch(&r)
	}
	got := map[outbox.ID]outbox.Record{}
	for lane := outbox.Unordered; lane < testLanes; lane++ {
		for _, r := range e.read(lane, outbox.ID{}, far, len(want)+1) {
			got[r.ID] = r
		}
	}
	if len(got) != len(want) {
		t.Fatalf("read %d rows, inserted %d", len(got), len(want))
	}
	for _, r := range want {
		checkRecord(t, "Read", got[r.ID], stored(r))
	}
}

// Header bytes survive verbatim: order, duplicate names, empty values, arbitrary bytes.
func testRoundTripHeaders(t *testing.T, h Harness) {
	e := newEnv(t, h)
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	sets := [][]headercodec.Header{
		nil,
		{{Name: "b", Value: []byte("2")}, {Name: "a", Value: []byte("1")}, {Name: "b", Value: []byte("3")}},
		{{Name: "", Value: nil}, {Name: "empty", Value: []byte{}}, {Name: "ünï ✓", Value: []byte("ünï")}},
		{{Name: "bytes", Value: all}, {Name: "nul", Value: []byte{0, 0, 0}}, {Name: "bad-utf8", Value: []byte{0xff, 0xfe, 0xc3}}},
		{{Name: "big", Value: []byte(strings.Repeat("v", 64<<10))}},
	}
	var recs []outbox.Record
	for i, hs := range sets {
		r := NewRecord(at(time.Duration(i) * time.Microsecond))
		r.Headers = headercodec.Encode(nil, hs)
		recs = append(recs, r)
	}
	e.insert(recs...)
	got := e.read(outbox.Unordered, outbox.ID{}, far, 10)
	if len(got) != len(recs) {
		t.Fatalf("Read = %d rows, want %d", len(got), len(recs))
	}
	for i := range recs {
		checkRecord(t, "Read", got[i], stored(recs[i]))
		if _, err := headercodec.Decode(got[i].Headers, nil); err != nil {
			t.Errorf("row %d: headers do not decode: %v", i, err)
		}
	}
}

// Empty, binary and 1 MiB bodies survive verbatim.
func testRoundTripBodies(t *testing.T, h Harness) {
	e := newEnv(t, h)
	rng := rand.New(rand.NewPCG(1, 2))
	big := make([]byte, 1<<20)
	for i := range big {
		big[i] = byte(rng.Uint32())
	}
	bodies := [][]byte{{}, {0}, []byte("\x00\xff\r\n'\"`\\;--"), big}
	var recs []outbox.Record
	for i, b := range bodies {
		r := NewRecord(at(time.Duration(i) * time.Microsecond))
		r.Body = b
		recs = append(recs, r)
	}
	e.insert(recs...)
	got := e.read(outbox.Unordered, outbox.ID{}, far, 10)
	if len(got) != len(recs) {
		t.Fatalf("Read = %d rows, want %d", len(got), len(recs))
	}
	for i := range recs {
		checkRecord(t, "Read", got[i], stored(recs[i]))
	}
	// A claim returns the same bytes.
	_, claimed := e.claimUnordered(10, far, far.Add(time.Minute))
	if len(claimed) != len(recs) {
		t.Fatalf("Claim = %d rows, want %d", len(claimed), len(recs))
	}
	for i := range recs {
		if string(claimed[i].Body) != string(recs[i].Body) {
			t.Errorf("row %d: claimed body differs (%d bytes, want %d)", i, len(claimed[i].Body), len(recs[i].Body))
		}
	}
}

// Instants keep microseconds and come back in UTC, whatever location they were given in.
func testRoundTripTimestamps(t *testing.T, h Harness) {
	e := newEnv(t, h)
	kolkata := time.FixedZone("+05:30", 5*3600+1800)
	newYork, err := time.LoadLocation("America/New_York")
	if err != nil {
		newYork = time.FixedZone("-05:00", -5*3600)
	}
	var recs []outbox.Record
	for i, c := range []struct{ created, deliver time.Time }{
		{at(0), time.Time{}},
		{at(time.Microsecond).In(kolkata), at(999999 * time.Microsecond).In(newYork)},
		{time.Date(2026, 3, 8, 7, 30, 0, 1000, time.UTC).In(newYork), time.Date(2026, 11, 1, 6, 30, 0, 999000, time.UTC)},
		{time.Date(1999, 12, 31, 23, 59, 59, 999999000, time.UTC), time.Date(2000, 1, 1, 0, 0, 0, 0, kolkata)},
	} {
		r := NewRecord(c.created)
		r.DeliverAt = c.deliver
		r.MessageType = string(rune('a' + i))
		recs = append(recs, r)
	}
	e.insert(recs...)
	got := e.read(outbox.Unordered, outbox.ID{}, far, 10)
	if len(got) != len(recs) {
		t.Fatalf("Read = %d rows, want %d", len(got), len(recs))
	}
	for i := range recs {
		checkRecord(t, "Read", got[i], stored(recs[i]))
	}
	// The claim expiry the store reports is the instant given, in UTC.
	until := far.Add(7 * time.Microsecond).In(kolkata)
	tok, claimed := e.claimUnordered(10, far.Add(-time.Hour).In(newYork), until)
	for _, c := range claimed {
		if c.ClaimToken != tok {
			t.Errorf("row %s: claim token %s, want %s", c.ID, c.ClaimToken, tok)
		}
		for _, d := range diffTime("ClaimExpiresAt", c.ClaimExpiresAt, until) {
			t.Errorf("row %s: %s", c.ID, d)
		}
	}
}

// Through a connection whose session time zone is not UTC, instants written and read
// are the same and come back in UTC, and eligibility boundaries stay exact.
func testRoundTripTimeZones(t *testing.T, h Harness) {
	if h.OpenInTimeZone == nil {
		t.Skipf("Harness.OpenInTimeZone is nil: %s cannot open a session in another time zone", h.Name)
	}
	e := newEnv(t, h)
	for i, tz := range []string{"+05:30", "-09:00", "America/New_York", "Asia/Kathmandu"} {
		t.Run(tz, func(t *testing.T) {
			db, err := h.OpenInTimeZone(tz)
			if errors.Is(err, errors.ErrUnsupported) {
				t.Skipf("%s cannot use time zone %s: %v", h.Name, tz, err)
			}
			if err != nil {
				t.Fatalf("OpenInTimeZone(%q): %v", tz, err)
			}
			t.Cleanup(func() { _ = db.Close() })
			other, err := h.NewStore(db, e.opts)
			if err != nil {
				t.Fatalf("NewStore: %v", err)
			}
			base := at(time.Duration(i) * time.Hour)
			viaUTC := NewRecord(base.Add(7 * time.Microsecond))
			viaTZ := NewRecord(base.Add(8 * time.Microsecond))
			viaTZ.DeliverAt = base.Add(time.Minute + 9*time.Microsecond)
			e.insert(viaUTC)
			tx, err := db.BeginTx(e.ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := other.Insert(e.ctx, tx, []outbox.Record{viaTZ}); err != nil {
				t.Fatalf("Insert through %s: %v", tz, err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			for _, s := range []struct {
				name  string
				store outbox.Store
			}{{"UTC session", e.store}, {tz + " session", other}} {
				got, err := s.store.Read(e.ctx, outbox.ReadQuery{Lane: outbox.Unordered, Now: viaTZ.DeliverAt}, make([]outbox.Record, 10))
				if err != nil {
					t.Fatalf("%s: Read: %v", s.name, err)
				}
				var found int
				for _, g := range got {
					for _, w := range []outbox.Record{viaUTC, viaTZ} {
						if g.ID == w.ID {
							found++
							checkRecord(t, s.name+": Read", cloneRecord(g), stored(w))
						}
					}
				}
				if found != 2 {
					t.Fatalf("%s: Read found %d of the 2 rows", s.name, found)
				}
				// Due exactly at DeliverAt, not a microsecond before, through either session.
				if n := countOf(e.ctx, t, s.store, viaTZ.DeliverAt.Add(-time.Microsecond)) - countOf(e.ctx, t, s.store, viaTZ.DeliverAt); n != -1 {
					t.Errorf("%s: the row due at %s is not eligible exactly then (count difference %d)", s.name, fmtTime(viaTZ.DeliverAt), n)
				}
			}
			// Leave the table as found for the next zone.
			tok, claimed := e.claimUnordered(10, far, far.Add(time.Minute))
			if len(claimed) != 2 {
				t.Fatalf("claim = %d rows, want 2", len(claimed))
			}
			n, err := other.Complete(e.ctx, outbox.CompleteParams{Token: tok, IDs: ids(claimed), Now: far, Lane: outbox.Unordered})
			wantN(t, tz+" session: Complete", n, err, 2)
		})
	}
}

func countOf(ctx context.Context, t *testing.T, s outbox.Store, now time.Time) int64 {
	t.Helper()
	n, err := s.Count(ctx, now)
	if err != nil {
		t.Fatalf("Count: %v", err)
	}
	return n
}

// Insert ignores status, attempts, error and claim fields: rows start pending, eligible.
func testInsertIgnoresState(t *testing.T, h Harness) {
	e := newEnv(t, h)
	r := NewRecord(at(0))
	r.Status = outbox.StatusParked
	r.Attempts = 5
	r.LastError = "previous failure"
	r.ClaimToken = outbox.NewToken()
	r.ClaimExpiresAt = far
	r.Corrupt = errors.New("ignored")
	e.insert(r)
	got := e.read(outbox.Unordered, outbox.ID{}, at(0), 10)
	if len(got) != 1 {
		t.Fatalf("Read = %d rows, want 1 (the row must start pending and unclaimed)", len(got))
	}
	checkRecord(t, "Read", got[0], stored(r))
}

// Instants with nanoseconds (a caller passing time.Now()) are accepted everywhere and
// kept to within a microsecond.
func testRoundTripNanoseconds(t *testing.T, h Harness) {
	e := newEnv(t, h)
	r := NewRecord(at(0).Add(123_456 * time.Nanosecond))
	r.DeliverAt = at(time.Second).Add(999 * time.Nanosecond)
	e.insert(r)
	now := at(2 * time.Second).Add(1 * time.Nanosecond)
	got := e.readOne(outbox.Unordered, now)
	for _, c := range []struct {
		name      string
		got, want time.Time
	}{{"CreatedAt", got.CreatedAt, r.CreatedAt}, {"DeliverAt", got.DeliverAt, r.DeliverAt}} {
		if d := c.got.Sub(c.want); d <= -time.Microsecond || d >= time.Microsecond {
			t.Errorf("%s = %s, want %s to within a microsecond", c.name, fmtTime(c.got), fmtTime(c.want))
		}
	}
	until := now.Add(time.Minute + 777*time.Nanosecond)
	tok, claimed := e.claimUnordered(1, now, until)
	if len(claimed) != 1 {
		t.Fatalf("Claim = %d rows, want 1", len(claimed))
	}
	if d := claimed[0].ClaimExpiresAt.Sub(until); d <= -time.Microsecond || d >= time.Microsecond {
		t.Errorf("ClaimExpiresAt = %s, want %s to within a microsecond", fmtTime(claimed[0].ClaimExpiresAt), fmtTime(until))
	}
	if n := e.renew(outbox.RenewParams{Token: tok, Now: now.Add(time.Nanosecond), Until: until.Add(time.Second), Lane: outbox.Unordered}); n != 1 {
		t.Fatalf("Renew = %d, want 1", n)
	}
	if n := e.complete(outbox.CompleteParams{Token: tok, IDs: idsOf(r), Now: now.Add(2 * time.Nanosecond), Lane: outbox.Unordered}); n != 1 {
		t.Fatalf("Complete = %d, want 1", n)
	}
}
